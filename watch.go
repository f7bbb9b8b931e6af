package sluice

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/stat"
)

// maxWatches is the most watches an engine holds at once, 1,000; Watch
// refuses more with ErrTooManyWatches. A watch keeps one 8-byte word per second of
// its window (two for stat.MetricAvgRT): 2.3 KiB for a five-minute window,
// 28 KiB for an hour (56 KiB for stat.MetricAvgRT).
const maxWatches = 1000

// ErrTooManyWatches is returned (wrapped, with the bound) by Watch when the
// engine already holds 1,000 watches, the most it holds at once.
var ErrTooManyWatches = errors.New("sluice: too many watches")

// Watch starts watching w.Metric of w.Resource over a sliding window of
// w.Window: the engine publishes stat.EventWatchFired on its event stream
// (Subscribe) when the metric over the window reaches w.Threshold, and
// stat.EventWatchCleared when it falls back below; it fires again only
// after it cleared. It returns the function that stops the watch (calling
// it more than once does nothing), or an error naming the field of w that
// is invalid, ErrTooManyWatches, or ErrClosed.
//
// The window slides by whole seconds of the engine's clock, over the
// per-second history (History): every window of w.Window that ends at a
// second boundary is evaluated, once that second has ended, so a burst
// that straddles a minute of the wall clock is seen whole. Event's At is
// the end of the window, Value the metric over it. The seconds before the
// watch was made count too (as far as the history goes back), so a watch
// made over a window that is already at the threshold fires at the end of
// the current second.
//
// Nothing is added to the request path: an engine-owned goroutine, started
// by the first watch and stopped by Close (or when no watch is left),
// wakes at each second boundary of the engine's clock, reads the seconds
// that ended from the history of each watched resource, and delivers the
// events, in order, outside every lock. A goroutine that was held up reads
// every second it missed (up to the history's length) and reports each
// crossing at the second it happened. A resource the engine does not track
// (not yet, or no more: idle resources are forgotten) counts as quiet.
//
// An evaluation in progress when the watch is stopped may still report
// it. Subscribers receive watch events on the evaluator's goroutine, which
// Close waits for: a subscriber must not call Close while it handles one.
func (eng *Engine) Watch(w stat.Watch) (cancel func(), err error) {
	secs, err := eng.checkWatch(w)
	if err != nil {
		return nil, err
	}
	ws := &watchState{w: w, ring: make([]int64, secs)}
	if w.Metric == stat.MetricAvgRT {
		ws.ring2 = make([]int64, secs)
	}
	// The seconds before now: the window over them is the watch's
	// starting point.
	now := eng.clock.Nanotime()
	ws.next = now / int64(time.Second)
	if x := eng.reg.get(w.Resource); x != nil {
		for _, s := range x.node.History(now, w.Window) {
			ws.push(s)
		}
	}
	if err := eng.watches.add(eng, ws); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { eng.watches.remove(ws) }) }, nil
}

// Watch starts a watch on the default engine (see Engine.Watch). It stays
// with that engine: after Close or SetDefault, watch again on the new
// default engine.
func Watch(w stat.Watch) (cancel func(), err error) { return defaultEngine().Watch(w) }

// checkWatch validates w and returns its window in seconds.
func (eng *Engine) checkWatch(w stat.Watch) (int, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("sluice: watch on %q: %s: %s", w.Resource, field, fmt.Sprintf(format, args...))
	}
	if eng.closed.Load() {
		return 0, ErrClosed
	}
	if w.Resource == "" {
		return 0, bad("Resource", "empty")
	}
	if w.Metric < stat.MetricPass || w.Metric > stat.MetricMaxConcurrency {
		return 0, bad("Metric", "%v is not one of stat.MetricPass to stat.MetricMaxConcurrency", w.Metric)
	}
	keep := eng.historyLen()
	switch {
	case keep == 0:
		return 0, bad("Window", "the engine keeps no history (WithHistory)")
	case w.Window < time.Second || w.Window%time.Second != 0:
		return 0, bad("Window", "%v is not a whole number of seconds, at least one", w.Window)
	case w.Window > time.Duration(keep)*time.Second:
		return 0, bad("Window", "%v is longer than the engine's history, %v (WithHistory)", w.Window, time.Duration(keep)*time.Second)
	}
	if math.IsNaN(w.Threshold) || math.IsInf(w.Threshold, 0) || w.Threshold <= 0 {
		return 0, bad("Threshold", "%v is not a positive finite number", w.Threshold)
	}
	return int(w.Window / time.Second), nil
}

// historyLen returns the number of seconds of history each resource keeps.
func (eng *Engine) historyLen() int64 {
	keep := eng.reg.history
	if keep > window.MaxHistory {
		keep = window.MaxHistory
	}
	if keep <= 0 {
		return 0
	}
	return int64((keep + time.Second - 1) / time.Second)
}

// watchState is one watch and its window: the values of its last seconds,
// in a ring, and their sum. Only the evaluator touches it once it is added.
type watchState struct {
	w     stat.Watch
	ring  []int64 // per second: the count, RT sum (µs) or maximum
	ring2 []int64 // per second, for MetricAvgRT: the exits
	pos   int     // the ring's oldest slot, the next one written
	sum   int64   // of ring (not for MetricMaxConcurrency)
	sum2  int64   // of ring2
	next  int64   // the first second (index) not yet in the window
	above bool    // fired and not cleared
}

// push moves the window on by second s.
func (ws *watchState) push(s stat.Second) {
	var v, v2 int64
	switch ws.w.Metric {
	case stat.MetricPass:
		v = int64(s.Pass)
	case stat.MetricBlock:
		v = int64(s.Block)
	case stat.MetricComplete:
		v = int64(s.Complete)
	case stat.MetricError:
		v = int64(s.Error)
	case stat.MetricAvgRT:
		v, v2 = int64(math.Round(s.MeanConcurrency*1e6)), int64(s.Complete) // µs summed over one second
	case stat.MetricMaxConcurrency:
		v = s.MaxConcurrency
	}
	ws.sum += v - ws.ring[ws.pos]
	ws.ring[ws.pos] = v
	if ws.ring2 != nil {
		ws.sum2 += v2 - ws.ring2[ws.pos]
		ws.ring2[ws.pos] = v2
	}
	ws.pos++
	if ws.pos == len(ws.ring) {
		ws.pos = 0
	}
}

// value returns the metric over the window.
func (ws *watchState) value() float64 {
	switch ws.w.Metric {
	case stat.MetricAvgRT:
		if ws.sum2 == 0 {
			return 0
		}
		return float64(ws.sum) / float64(ws.sum2) / 1000
	case stat.MetricMaxConcurrency:
		var m int64
		for _, v := range ws.ring {
			m = max(m, v)
		}
		return float64(m)
	}
	return float64(ws.sum)
}

// watchSet is an engine's watches and the goroutine that evaluates them.
type watchSet struct {
	mu      sync.Mutex
	list    []*watchState // copy on write: the evaluator iterates its own
	running bool          // the evaluator runs (stop and done are its)
	stop    chan struct{}
	done    chan struct{}
	closed  bool
}

// add adds ws, starting the evaluator if it is not running.
func (s *watchSet) add(eng *Engine, ws *watchState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || eng.closed.Load() {
		return ErrClosed
	}
	if len(s.list) >= maxWatches {
		return fmt.Errorf("%w: %d", ErrTooManyWatches, maxWatches)
	}
	s.list = append(s.list[:len(s.list):len(s.list)], ws)
	if !s.running {
		s.running = true
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go eng.evaluate(s.stop, s.done)
	}
	return nil
}

// remove removes ws; the evaluator stops at its next wake when none is left.
func (s *watchSet) remove(ws *watchState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make([]*watchState, 0, len(s.list))
	for _, x := range s.list {
		if x != ws {
			kept = append(kept, x)
		}
	}
	s.list = kept
}

// len returns the number of watches.
func (s *watchSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.list)
}

// current returns the watches, and false (marking the evaluator stopped)
// when there are none.
func (s *watchSet) current() ([]*watchState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.list) == 0 {
		s.running = false
		return nil, false
	}
	return s.list, true
}

// close stops the evaluator and waits for it. Later adds fail.
func (s *watchSet) close() {
	s.mu.Lock()
	s.closed = true
	s.list = nil
	running, stop, done := s.running, s.stop, s.done
	s.running = false
	s.mu.Unlock()
	if running {
		close(stop)
		<-done
	}
}

// evaluate is the evaluator's goroutine: at each second boundary of the
// engine's clock it evaluates the seconds that ended. It returns when stop
// closes or no watch is left.
func (eng *Engine) evaluate(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		now := eng.clock.Nanotime()
		list, ok := eng.watches.current()
		if !ok {
			return
		}
		eng.evaluateAt(now, list)
		next := (now/int64(time.Second) + 1) * int64(time.Second)
		t := eng.clock.NewTimer(time.Duration(next - eng.clock.Nanotime()))
		select {
		case <-t.C():
		case <-stop:
			t.Stop()
			return
		}
	}
}

// evaluateAt moves every watch of list on by the seconds that ended before
// now, second by second (so events come in the order of the seconds they
// report), and delivers the events.
//
// complexity: steps each watch second by second, with its condition, hold and resolution, so events keep the order of their seconds
func (eng *Engine) evaluateAt(now int64, list []*watchState) {
	cur := now / int64(time.Second) // seconds before cur have ended
	keep := eng.historyLen()
	// One read of history per resource, as far back as its watches need
	// (a watch that missed more seconds than the history keeps skips the
	// ones it lost).
	need := map[string]int64{}
	from := cur
	for _, ws := range list {
		if ws.next < cur-keep {
			ws.next = cur - keep
		}
		if ws.next < cur {
			need[ws.w.Resource] = max(need[ws.w.Resource], cur-ws.next)
			from = min(from, ws.next)
		}
	}
	if len(need) == 0 {
		return
	}
	hist := make(map[string][]stat.Second, len(need))
	for name, k := range need {
		if x := eng.reg.get(name); x != nil {
			hist[name] = x.node.History(now, time.Duration(k)*time.Second)
		}
	}
	second := func(name string, sec int64) stat.Second {
		h := hist[name]
		// h ends with second cur-1, one element per second.
		if i := len(h) - int(cur-sec); i >= 0 && i < len(h) {
			return h[i]
		}
		return stat.Second{Start: sec * int64(time.Second)}
	}
	queued := false
	for sec := from; sec < cur; sec++ {
		for _, ws := range list {
			if ws.next != sec {
				continue
			}
			ws.push(second(ws.w.Resource, sec))
			ws.next++
			v := ws.value()
			kind := stat.EventKind("")
			switch {
			case !ws.above && v >= ws.w.Threshold:
				kind, ws.above = stat.EventWatchFired, true
			case ws.above && v < ws.w.Threshold:
				kind, ws.above = stat.EventWatchCleared, false
			default:
				continue
			}
			eng.events.Enqueue(stat.Event{
				Kind: kind, At: (sec + 1) * int64(time.Second), Resource: ws.w.Resource,
				Value: v, Watch: ws.w,
			})
			queued = true
		}
	}
	if queued {
		eng.events.Drain()
	}
}
