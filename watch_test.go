package sluice

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// watchEvents collects the watch events of an engine's stream as
// "kind resource value @second" strings.
type watchEvents struct {
	mu  sync.Mutex
	got []string
	evs []stat.Event
}

func (r *watchEvents) on(ev stat.Event) {
	if ev.Kind != stat.EventWatchFired && ev.Kind != stat.EventWatchCleared {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, watchLine(ev))
	r.evs = append(r.evs, ev)
}

func watchLine(ev stat.Event) string {
	return string(ev.Kind) + " " + ev.Resource + " " + ftoa(ev.Value) + " @" + time.Duration(ev.At).String()
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func (r *watchEvents) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// settle waits until the watches' evaluator is parked on the clock: it has
// evaluated every second that ended and delivered the events.
func settle(t *testing.T, clk *sluicetest.ManualClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntil(ctx, 1), "the evaluator did not park on the clock")
}

// setAndSettle moves clk to t (seconds) and waits for the evaluator.
func setAndSettle(t *testing.T, clk *sluicetest.ManualClock, secs float64) {
	t.Helper()
	clk.Set(int64(secs * float64(time.Second)))
	settle(t, clk)
}

func mustWatch(t *testing.T, g *Engine, clk *sluicetest.ManualClock, w stat.Watch) func() {
	t.Helper()
	cancel, err := g.Watch(w)
	require.NoError(t, err)
	settle(t, clk)
	return cancel
}

// errorsAt makes n entries of res that exit at once with an error.
func errorsAt(t *testing.T, g *Engine, res string, n int) {
	t.Helper()
	boom := errors.New("boom")
	for i := 0; i < n; i++ {
		p, err := g.Entry(res)
		require.NoError(t, err)
		p.SetError(boom)
		p.Exit()
	}
}

func v(n float64) string { return ftoa(n) }

// TestWatchSlidingMinute: 150 errors at :59 and 150 at :00 are 300 in one
// minute, which no wall-clock minute holds: the watch fires at the end of
// the second that completed them, once while they stay in the window, and
// clears at the second the first burst leaves it, reported at that second
// even when the evaluator notices it later; a new burst fires again.
func TestWatchSlidingMinute(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	w := stat.Watch{Resource: "r", Metric: stat.MetricError, Window: time.Minute, Threshold: 250}
	defer mustWatch(t, g, clk, w)()

	setAndSettle(t, clk, 59.5)
	errorsAt(t, g, "r", 150)
	setAndSettle(t, clk, 60.2)
	assert.Empty(t, rec.take(), "150 in second 59")
	errorsAt(t, g, "r", 150)
	setAndSettle(t, clk, 60.9)
	assert.Empty(t, rec.take(), "second 60 has not ended")
	setAndSettle(t, clk, 61)
	assert.Equal(t, []string{"watch-fired r " + v(300) + " @1m1s"}, rec.take())
	require.Len(t, rec.evs, 1)
	ev := rec.evs[0]
	assert.Equal(t, w, ev.Watch)
	assert.Equal(t, int64(61*time.Second), ev.At, "the end of the window [1s, 61s)")

	errorsAt(t, g, "r", 10) // more while above: no new event
	for _, s := range []float64{62, 90, 119.5} {
		setAndSettle(t, clk, s)
		assert.Empty(t, rec.take(), "at %vs", s)
	}
	// Second 59 leaves the window ending at 120 s; the evaluator is told
	// only at 125 s.
	setAndSettle(t, clk, 125)
	assert.Equal(t, []string{"watch-cleared r " + v(160) + " @2m0s"}, rec.take())
	errorsAt(t, g, "r", 250) // the 10 of second 61 have left the window
	setAndSettle(t, clk, 126)
	assert.Equal(t, []string{"watch-fired r " + v(250) + " @2m6s"}, rec.take())
}

// TestWatchAtSecondBoundaries: a window of N seconds counts exactly the
// seconds [end-N, end); entries at the last nanosecond of a second and the
// first of the next fall in those seconds.
func TestWatchAtSecondBoundaries(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	defer mustWatch(t, g, clk, stat.Watch{Resource: "r", Metric: stat.MetricPass, Window: 2 * time.Second, Threshold: 3})()

	clk.Set(int64(10*time.Second) - 1)
	require.True(t, try(g, "r"))
	require.True(t, try(g, "r")) // 2 in second 9
	clk.Set(int64(10 * time.Second))
	require.True(t, try(g, "r")) // 1 in second 10
	settle(t, clk)
	assert.Empty(t, rec.take())
	setAndSettle(t, clk, 11)
	assert.Equal(t, []string{"watch-fired r " + v(3) + " @11s"}, rec.take())
	setAndSettle(t, clk, 12) // [10, 12): 1
	assert.Equal(t, []string{"watch-cleared r " + v(1) + " @12s"}, rec.take())
}

// TestWatchMetrics: each metric's value over the window.
func TestWatchMetrics(t *testing.T) {
	tests := []struct {
		metric    stat.Metric
		threshold float64
		want      []string
	}{
		{stat.MetricPass, 4, []string{"watch-fired r " + v(4) + " @2s", "watch-cleared r " + v(0) + " @4s"}},
		{stat.MetricBlock, 2, []string{"watch-fired r " + v(2) + " @2s", "watch-cleared r " + v(0) + " @4s"}},
		{stat.MetricComplete, 3, []string{"watch-fired r " + v(4) + " @3s", "watch-cleared r " + v(0) + " @5s"}},
		{stat.MetricError, 1, []string{"watch-fired r " + v(1) + " @3s", "watch-cleared r " + v(0) + " @5s"}},
		// Seconds 1 and 2: (100 + 1100 + 1200 + 1500 ms) / 4 exits.
		{stat.MetricAvgRT, 600, []string{"watch-fired r " + v(975) + " @3s", "watch-cleared r " + v(0) + " @5s"}},
		// Second 1: 4 after its last pass; second 2: 3 at its start.
		{stat.MetricMaxConcurrency, 4, []string{"watch-fired r " + v(4) + " @2s", "watch-cleared r " + v(3) + " @4s"}},
	}
	for _, tt := range tests {
		t.Run(tt.metric.String(), func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4})
			var rec watchEvents
			defer g.Subscribe(rec.on)()
			defer mustWatch(t, g, clk, stat.Watch{Resource: "r", Metric: tt.metric, Window: 2 * time.Second, Threshold: tt.threshold})()

			// Second 1: 4 pass and 2 are refused; one exits after
			// 100 ms, the others in second 2, one of them failed.
			clk.Set(int64(time.Second))
			var ps []Pass
			for i := 0; i < 4; i++ {
				p, err := g.Entry("r")
				require.NoError(t, err)
				ps = append(ps, p)
			}
			require.False(t, try(g, "r"))
			require.False(t, try(g, "r"))
			clk.Set(int64(1100 * time.Millisecond))
			ps[0].Exit() // 100 ms
			clk.Set(int64(2100 * time.Millisecond))
			ps[1].SetError(errors.New("boom"))
			ps[1].Exit() // 1100 ms
			clk.Set(int64(2200 * time.Millisecond))
			ps[2].Exit() // 1200 ms
			clk.Set(int64(2500 * time.Millisecond))
			ps[3].Exit() // 1500 ms
			for s := 3; s <= 6; s++ {
				setAndSettle(t, clk, float64(s))
			}
			assert.Equal(t, tt.want, rec.take())
		})
	}
}

func TestWatchInvalid(t *testing.T) {
	g, _ := newTestEngine(t, 0, WithHistory(2*time.Minute))
	ok := stat.Watch{Resource: "r", Metric: stat.MetricError, Window: time.Minute, Threshold: 250}
	tests := []struct {
		name string
		give func(w *stat.Watch)
		want string
	}{
		{"no resource", func(w *stat.Watch) { w.Resource = "" }, `sluice: watch on "": Resource: empty`},
		{"no metric", func(w *stat.Watch) { w.Metric = 0 }, `sluice: watch on "r": Metric: Metric(0) is not one of stat.MetricPass to stat.MetricMaxConcurrency`},
		{"unknown metric", func(w *stat.Watch) { w.Metric = 42 }, `Metric: Metric(42) is not one`},
		{"no window", func(w *stat.Watch) { w.Window = 0 }, `sluice: watch on "r": Window: 0s is not a whole number of seconds, at least one`},
		{"negative window", func(w *stat.Watch) { w.Window = -time.Minute }, `Window: -1m0s is not a whole number`},
		{"fractional window", func(w *stat.Watch) { w.Window = 1500 * time.Millisecond }, `Window: 1.5s is not a whole number`},
		{"window past history", func(w *stat.Watch) { w.Window = 121 * time.Second }, `sluice: watch on "r": Window: 2m1s is longer than the engine's history, 2m0s (WithHistory)`},
		{"zero threshold", func(w *stat.Watch) { w.Threshold = 0 }, `sluice: watch on "r": Threshold: 0 is not a positive finite number`},
		{"negative threshold", func(w *stat.Watch) { w.Threshold = -1 }, `Threshold: -1 is not`},
		{"NaN threshold", func(w *stat.Watch) { w.Threshold = math.NaN() }, `Threshold: NaN is not`},
		{"infinite threshold", func(w *stat.Watch) { w.Threshold = math.Inf(1) }, `Threshold: +Inf is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := ok
			tt.give(&w)
			cancel, err := g.Watch(w)
			require.Error(t, err)
			assert.Nil(t, cancel)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	assert.Equal(t, 0, g.watches.len(), "nothing added")
	assert.Equal(t, 0, g.clock.(*sluicetest.ManualClock).Waiters(), "no evaluator started")

	noHist, _ := newTestEngine(t, 0, WithHistory(0))
	_, err := noHist.Watch(ok)
	assert.EqualError(t, err, `sluice: watch on "r": Window: the engine keeps no history (WithHistory)`)

	require.NoError(t, g.Close())
	_, err = g.Watch(ok)
	assert.ErrorIs(t, err, ErrClosed)
}

// TestWatchLimit: at most maxWatches at once; cancelling makes room, and
// cancelling twice does nothing.
func TestWatchLimit(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	w := stat.Watch{Resource: "r", Metric: stat.MetricPass, Window: time.Second, Threshold: 1}
	cancels := make([]func(), maxWatches)
	for i := range cancels {
		c, err := g.Watch(w)
		require.NoError(t, err)
		cancels[i] = c
	}
	_, err := g.Watch(w)
	require.ErrorIs(t, err, ErrTooManyWatches)
	assert.EqualError(t, err, "sluice: too many watches: 1000")
	cancels[0]()
	cancels[0]()
	assert.Equal(t, maxWatches-1, g.watches.len())
	c, err := g.Watch(w)
	require.NoError(t, err)
	defer c()

	// A thousand watches of one resource fire together, in the order
	// they were made.
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	settle(t, clk)
	require.True(t, try(g, "r"))
	setAndSettle(t, clk, 1)
	assert.Len(t, rec.take(), maxWatches)
}

// TestWatchCancel: a cancelled watch reports nothing more, and the
// evaluator stops once no watch is left (and starts again with the next).
func TestWatchCancel(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	w := stat.Watch{Resource: "r", Metric: stat.MetricPass, Window: 5 * time.Second, Threshold: 1}
	c1 := mustWatch(t, g, clk, w)
	w2 := w
	w2.Threshold = 2
	c2 := mustWatch(t, g, clk, w2)
	require.True(t, try(g, "r"))
	setAndSettle(t, clk, 1)
	assert.Equal(t, []string{"watch-fired r " + v(1) + " @1s"}, rec.take())
	c1()
	require.True(t, try(g, "r"))
	setAndSettle(t, clk, 2)
	require.Len(t, rec.evs, 2)
	assert.Equal(t, w2, rec.evs[1].Watch, "only the one left")
	assert.Equal(t, []string{"watch-fired r " + v(2) + " @2s"}, rec.take())

	g.watches.mu.Lock()
	done := g.watches.done
	g.watches.mu.Unlock()
	c2()
	clk.Advance(time.Second)
	<-done // no watch left: the evaluator returned
	assert.Equal(t, 0, clk.Waiters())

	// A new watch starts it again, from the history.
	defer mustWatch(t, g, clk, w2)()
	setAndSettle(t, clk, 4)
	assert.Equal(t, []string{"watch-fired r " + v(2) + " @4s"}, rec.take(), "seconds 0 and 1 are in its window")
}

// TestWatchStartsFromHistory: a watch made over a window already past its
// threshold fires at the end of the current second.
func TestWatchStartsFromHistory(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	clk.Set(int64(3 * time.Second))
	errorsAt(t, g, "r", 5)
	clk.Set(int64(30*time.Second + 500*time.Millisecond))
	defer mustWatch(t, g, clk, stat.Watch{Resource: "r", Metric: stat.MetricError, Window: time.Minute, Threshold: 5})()
	assert.Empty(t, rec.take())
	setAndSettle(t, clk, 31)
	assert.Equal(t, []string{"watch-fired r " + v(5) + " @31s"}, rec.take())
	setAndSettle(t, clk, 64)
	assert.Equal(t, []string{"watch-cleared r " + v(0) + " @1m4s"}, rec.take())
}

// TestWatchReclaimedResource: a watch does not keep its resource; while the
// engine has forgotten it, its seconds count as quiet, and a new resource
// of the name is watched as the old one was.
func TestWatchReclaimedResource(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	// A watch made before the resource exists.
	defer mustWatch(t, g, clk, stat.Watch{Resource: "idle", Metric: stat.MetricPass, Window: 10 * time.Second, Threshold: 3})()
	setAndSettle(t, clk, 5)
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "idle"))
	}
	setAndSettle(t, clk, 6)
	assert.Equal(t, []string{"watch-fired idle " + v(3) + " @6s"}, rec.take())
	setAndSettle(t, clk, 16)
	assert.Equal(t, []string{"watch-cleared idle " + v(0) + " @16s"}, rec.take())

	// Idle long enough to be forgotten: a rule load's sweep notes its
	// count, the next one a reclaimAfter later finds it unchanged.
	clk.Set(int64(5*time.Second + reclaimAfter + time.Second))
	mustLoadFlow(t, g, rules.Flow{Resource: "other", Threshold: 1})
	_, tracked := g.Snapshot("idle")
	require.True(t, tracked)
	clk.Set(int64(5*time.Second + 2*reclaimAfter + 2*time.Second))
	mustLoadFlow(t, g, rules.Flow{Resource: "other", Threshold: 2})
	_, tracked = g.Snapshot("idle")
	require.False(t, tracked, "forgotten")
	settle(t, clk)
	assert.Empty(t, rec.take())

	end := time.Duration(clk.Nanotime()).Truncate(time.Second) + time.Second
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "idle"))
	}
	setAndSettle(t, clk, end.Seconds())
	assert.Equal(t, []string{"watch-fired idle " + v(3) + " @" + end.String()}, rec.take())
}

// TestWatchAcrossRuleReloads: rule loads leave the counts, and so the
// watches, alone.
func TestWatchAcrossRuleReloads(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 2})
	defer mustWatch(t, g, clk, stat.Watch{Resource: "r", Metric: stat.MetricBlock, Window: 3 * time.Second, Threshold: 3})()

	for i := 0; i < 4; i++ {
		try(g, "r") // 2 pass, 2 refused
	}
	setAndSettle(t, clk, 1)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1})
	for i := 0; i < 2; i++ {
		try(g, "r") // 1 pass, 1 refused
	}
	mustLoadFlow(t, g) // no rules: nothing refused from here
	require.True(t, try(g, "r"))
	setAndSettle(t, clk, 2)
	assert.Equal(t, []string{"watch-fired r " + v(3) + " @2s"}, rec.take())
	setAndSettle(t, clk, 4)
	assert.Equal(t, []string{"watch-cleared r " + v(1) + " @4s"}, rec.take())
}

// TestWatchConcurrent: entries on several goroutines while the clock moves
// and watches are made and cancelled; afterwards the events alternate
// fired/cleared per watch, and nothing is left running after Close.
func TestWatchConcurrent(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec watchEvents
	defer g.Subscribe(rec.on)()
	defer mustWatch(t, g, clk, stat.Watch{Resource: "r", Metric: stat.MetricPass, Window: 2 * time.Second, Threshold: 50})()
	const workers, per = 4, 500
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				try(g, "r")
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			c, err := g.Watch(stat.Watch{Resource: "r", Metric: stat.MetricMaxConcurrency, Window: time.Second, Threshold: float64(2 + i)})
			if assert.NoError(t, err) {
				c()
			}
		}
	}()
	stop := make(chan struct{})
	go func() { wg.Wait(); close(stop) }()
	for running := true; running; {
		select {
		case <-stop:
			running = false
		default:
			clk.Advance(50 * time.Millisecond)
		}
	}
	clk.Advance(5 * time.Second)
	settle(t, clk)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	above := map[stat.Watch]bool{}
	for _, ev := range rec.evs {
		fired := ev.Kind == stat.EventWatchFired
		assert.NotEqual(t, above[ev.Watch], fired, "%s", watchLine(ev))
		above[ev.Watch] = fired
	}
}

// TestWatchDefaultEngine: the package-level Watch acts on the default
// engine.
func TestWatchDefaultEngine(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	old := SetDefault(New(WithClock(clk)))
	defer func() { _ = SetDefault(old).Close() }()
	var rec watchEvents
	defer Default().Subscribe(rec.on)()
	cancel, err := Watch(stat.Watch{Resource: "d", Metric: stat.MetricPass, Window: time.Second, Threshold: 1})
	require.NoError(t, err)
	defer cancel()
	settle(t, clk)
	p, err := Entry("d")
	require.NoError(t, err)
	p.Exit()
	setAndSettle(t, clk, 1)
	assert.Equal(t, []string{"watch-fired d " + v(1) + " @1s"}, rec.take())
}

// TestWatchSystemClock: on the system clock the evaluator wakes at the
// second boundaries by itself. The wait is for the event, however late the
// host delivers it; nothing is asserted about when.
func TestWatchSystemClock(t *testing.T) {
	g := New()
	defer func() { require.NoError(t, g.Close()) }()
	got := make(chan stat.Event, 4)
	defer g.Subscribe(func(ev stat.Event) {
		if ev.Kind == stat.EventWatchFired {
			got <- ev
		}
	})()
	stop, err := g.Watch(stat.Watch{Resource: "r", Metric: stat.MetricPass, Window: 2 * time.Second, Threshold: 1})
	require.NoError(t, err)
	defer stop()
	require.True(t, try(g, "r"))
	select {
	case ev := <-got:
		assert.Equal(t, float64(1), ev.Value)
		assert.Zero(t, ev.At%int64(time.Second), "the end of a window is a second boundary")
	case <-time.After(30 * time.Second):
		t.Error("no watch-fired event within 30 s")
	}
}
