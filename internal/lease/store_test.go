package lease

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
)

// behavior is how a memStore answers.
type behavior uint8

const (
	answer behavior = iota // decide at once
	fail                   // fail at once
	hang                   // wait for the call's context to end
	gated                  // wait for the gate to close (or the context to end), then decide
	slow                   // wait for the store's clock to move by delay (or the context to end), then decide
)

var errDown = errors.New("memstore: down")

// callerKey is the key of a context value by which a memStore tells which
// caller's context a Take call runs under (none for the store goroutine's).
type callerKey struct{}

// memStore is a cluster.Store in memory for tests: a token bucket, a
// sliding-window log and GCRA, deciding on its own clock (in tests the
// ManualClock the Manager reads), as the Redis scripts do. It can fail,
// hang, wait at a gate or be slow on command, and it records every call.
type memStore struct {
	clk core.Clock

	mu       sync.Mutex
	behavior behavior
	gate     chan struct{}
	released chan struct{} // closed by release: hung calls return
	delay    time.Duration
	tb       map[string]*tbState
	sw       map[string][]swEntry
	tat      map[string]float64

	called    *sync.Cond          // broadcast at every Take call (waitTakeCalls)
	quiet     bool                // do not record batches (benchmarks)
	takes     int                 // Take calls that decided
	takeCalls int                 // every Take call
	batches   [][]cluster.Request // requests of every Take call
	callers   []any               // the callerKey value of every Take call's context
	granted   map[string]int64    // permits granted, by key
	given     map[string]int64    // permits given back, by key
	giveCalls int
	live      int
	ttls      []time.Duration
	beatCalls int
}

type tbState struct {
	tokens float64
	last   int64
}

type swEntry struct{ t, n int64 }

func newMemStore(clk core.Clock) *memStore {
	return &memStore{
		clk:     clk,
		tb:      make(map[string]*tbState),
		sw:      make(map[string][]swEntry),
		tat:     make(map[string]float64),
		granted: make(map[string]int64),
		given:   make(map[string]int64),
		live:    1,

		released: make(chan struct{}),
	}
}

// set changes how the store answers from the next call on.
func (s *memStore) set(b behavior) {
	s.mu.Lock()
	s.behavior = b
	if b == gated {
		s.gate = make(chan struct{})
	}
	s.mu.Unlock()
}

// open lets the calls waiting at the gate through, and later ones too.
func (s *memStore) open() {
	s.mu.Lock()
	close(s.gate)
	s.behavior = answer
	s.mu.Unlock()
}

// release makes the store answer from now on, letting calls at the gate
// and hung calls through: tests' cleanup closes Managers on a store that answers, as the
// manual clock no longer moves.
func (s *memStore) release() {
	s.mu.Lock()
	if s.behavior == gated {
		close(s.gate)
	}
	s.behavior = answer
	select {
	case <-s.released:
	default:
		close(s.released)
	}
	s.mu.Unlock()
}

// wait applies the store's behavior to a call; a non-nil error fails it.
func (s *memStore) wait(ctx context.Context) error {
	s.mu.Lock()
	b, gate, delay, released := s.behavior, s.gate, s.delay, s.released
	s.mu.Unlock()
	switch b {
	case fail:
		return errDown
	case hang:
		select {
		case <-ctx.Done():
		case <-released:
		}
		return ctx.Err()
	case gated:
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	case slow:
		t := s.clk.NewTimer(delay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return ctx.Err()
}

func (s *memStore) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	s.mu.Lock()
	s.takeCalls++
	if s.called != nil {
		s.called.Broadcast()
	}
	if !s.quiet {
		s.batches = append(s.batches, append([]cluster.Request(nil), reqs...))
		s.callers = append(s.callers, ctx.Value(callerKey{}))
	}
	s.mu.Unlock()
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	now := s.clk.Nanotime()
	for i, r := range reqs {
		var g cluster.Grant
		switch r.Budget.Algorithm {
		case cluster.TokenBucket:
			g = s.bucket(r, now)
		case cluster.SlidingWindow:
			g = s.window(r, now)
		default:
			g = s.pace(r, now)
		}
		grants[i] = g
		s.granted[r.Budget.Key] += g.N
	}
	return nil
}

// eps absorbs the rounding of refills computed in float64.
const eps = 1e-9

func burstOf(b cluster.Budget) float64 {
	if b.Burst == 0 {
		return b.Limit
	}
	return b.Burst
}

func (s *memStore) bucket(r cluster.Request, now int64) cluster.Grant {
	b := r.Budget
	burst := burstOf(b)
	rate := b.Limit / float64(b.Interval)
	st := s.tb[b.Key]
	if st == nil {
		st = &tbState{tokens: burst, last: now}
		s.tb[b.Key] = st
	}
	if now > st.last {
		st.tokens = min(burst, st.tokens+float64(now-st.last)*rate)
		st.last = now
	}
	var g int64
	switch {
	case st.tokens+eps >= float64(r.N):
		g = r.N
	case r.Partial && math.Floor(st.tokens+eps) >= 1:
		g = int64(math.Floor(st.tokens + eps))
	}
	st.tokens = max(st.tokens-float64(g), 0)
	gr := cluster.Grant{N: g}
	if rest := float64(r.N - g); rest > 0 && rest <= burst {
		gr.RetryAfter = time.Duration(math.Ceil((rest - st.tokens) / rate))
	}
	return gr
}

func (s *memStore) window(r cluster.Request, now int64) cluster.Grant {
	b := r.Budget
	log := s.sw[b.Key]
	for len(log) > 0 && log[0].t <= now-int64(b.Interval) {
		log = log[1:]
	}
	var used int64
	for _, e := range log {
		used += e.n
	}
	limit := int64(b.Limit)
	var g int64
	switch {
	case used+r.N <= limit:
		g = r.N
	case r.Partial && limit-used >= 1:
		g = limit - used
	}
	if g > 0 {
		log = append(log, swEntry{now, g})
	}
	s.sw[b.Key] = log
	gr := cluster.Grant{N: g}
	if g < r.N && len(log) > 0 {
		gr.RetryAfter = time.Duration(log[0].t + int64(b.Interval) - now)
	}
	return gr
}

func (s *memStore) pace(r cluster.Request, now int64) cluster.Grant {
	b := r.Budget
	step := float64(b.Interval) / b.Limit
	tat := max(s.tat[b.Key], float64(now))
	wait := int64(math.Ceil(tat - float64(now) - eps))
	if wait > int64(b.MaxQueue) {
		return cluster.Grant{RetryAfter: time.Duration(wait - int64(b.MaxQueue))}
	}
	s.tat[b.Key] = tat + float64(r.N)*step
	return cluster.Grant{N: r.N, Wait: time.Duration(wait)}
}

func (s *memStore) Give(ctx context.Context, b cluster.Budget, n int64) error {
	s.mu.Lock()
	s.giveCalls++
	s.mu.Unlock()
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.given[b.Key] += n
	now := s.clk.Nanotime()
	switch b.Algorithm {
	case cluster.TokenBucket:
		if st := s.tb[b.Key]; st != nil {
			st.tokens = min(burstOf(b), st.tokens+float64(n))
		}
	case cluster.SlidingWindow:
		log := s.sw[b.Key]
		for n > 0 && len(log) > 0 {
			e := &log[len(log)-1]
			d := min(n, e.n)
			e.n -= d
			n -= d
			if e.n == 0 {
				log = log[:len(log)-1]
			}
		}
		s.sw[b.Key] = log
	default:
		step := float64(b.Interval) / b.Limit
		s.tat[b.Key] = max(float64(now), s.tat[b.Key]-float64(n)*step)
	}
	return nil
}

func (s *memStore) Beat(ctx context.Context, m cluster.Member, ttl time.Duration) (int, error) {
	s.mu.Lock()
	s.beatCalls++
	s.ttls = append(s.ttls, ttl)
	s.mu.Unlock()
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live, nil
}

func (s *memStore) Members(ctx context.Context, app string) ([]cluster.Member, error) {
	return nil, s.wait(ctx)
}

// tokens returns the level of key's bucket at the store's clock.
func (s *memStore) tokens(b cluster.Budget) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tb[b.Key]
	if st == nil {
		return burstOf(b)
	}
	now := s.clk.Nanotime()
	return min(burstOf(b), st.tokens+float64(now-st.last)*b.Limit/float64(b.Interval))
}

// counts returns the calls and permits the store has seen.
func (s *memStore) counts(key string) (takeCalls int, granted, given int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeCalls, s.granted[key], s.given[key]
}

// waitTakeCalls waits until the store has seen at least n Take calls: a
// caller's context timer is on the clock a moment before its Take reaches
// the store, so counting timers alone does not say the call arrived.
func (s *memStore) waitTakeCalls(t *testing.T, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.called == nil {
		s.called = sync.NewCond(&s.mu)
	}
	expired := false
	stop := time.AfterFunc(30*time.Second, func() {
		s.mu.Lock()
		expired = true
		s.called.Broadcast()
		s.mu.Unlock()
	})
	defer stop.Stop()
	for s.takeCalls < n && !expired {
		s.called.Wait()
	}
	if s.takeCalls < n {
		t.Fatalf("%d Take calls after 30 s, want %d", s.takeCalls, n)
	}
}

// requests returns the requests of every Take call so far.
func (s *memStore) requests() [][]cluster.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]cluster.Request(nil), s.batches...)
}

// acq is Acquire at the Limiter's clock's current reading.
func (l *Limiter) acq(ctx context.Context, n int64) Result {
	return l.Acquire(ctx, l.clock.Nanotime(), n)
}

// takeCallers returns the callerKey value of every recorded Take call's
// context, in order.
func (s *memStore) takeCallers() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]any(nil), s.callers...)
}
