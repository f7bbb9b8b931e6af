package adaptive

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// server is a simulated service for the limiter's tests: workers serve
// requests one at a time, first come first served, each taking the service
// time times a uniform jitter in [0.9, 1.1] times the current slowdown;
// requests beyond the workers wait in its queue. Clients arrive as a Poisson
// process. The simulation is discrete-event on a clock of its own (int64
// nanoseconds), seeded, so every run is the same.
type server struct {
	lim     *Limiter
	rng     *rand.Rand
	workers int
	service time.Duration
	// slow returns the slowdown factor at t (nil: 1).
	slow func(t int64) float64
	// delay returns a pure latency added to each request at t, outside the
	// workers (nil: 0): a dependency whose RT rises without queueing.
	delay func(t int64) time.Duration
	// rate is the offered load in requests per second.
	rate float64
	// share picks a request's priority share (nil: Default).
	share func(r *rand.Rand) Share
	// cancel is the fraction of the requests admitted while the server
	// queues whose client gives up after cancelAfter; the server still
	// does their work. Cancellations that come with load are what would
	// pull a limiter counting them the wrong way.
	cancel      float64
	cancelAfter time.Duration
	// refuseLater is the fraction of the requests admitted while more than
	// 80 are in flight that a later check refuses at once (released at
	// their start).
	refuseLater float64
	// naive counts cancelled and refused calls as samples (the mistake
	// the limiter avoids), for the tests to show they can tell.
	naive bool

	now    int64
	events evHeap
	busy   int
	queue  []*req
	// results
	rts      []time.Duration // RT of completed, sampled requests started after record
	record   int64
	admitted [3]int
	refused  [3]int
	trace    []point // the limit at each window end
}

type point struct {
	t     int64
	limit int64
}

type req struct {
	arrive    int64
	share     Share
	cancelled bool
	released  bool
	extra     time.Duration
}

type event struct {
	t    int64
	kind int // 0 arrival, 1 completion, 2 cancel
	r    *req
	seq  int
}

type evHeap []event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *evHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

var seq int

func (s *server) push(t int64, kind int, r *req) {
	seq++
	heap.Push(&s.events, event{t: t, kind: kind, r: r, seq: seq})
}

func (s *server) nextArrival() {
	gap := s.rng.ExpFloat64() / s.rate * 1e9
	s.push(s.now+int64(gap), 0, nil)
}

func (s *server) serviceTime() int64 {
	f := 1.0
	if s.slow != nil {
		f = s.slow(s.now)
	}
	return int64(float64(s.service) * (0.9 + 0.2*s.rng.Float64()) * f)
}

// run simulates until t (nanoseconds from the start).
func (s *server) run(until int64) {
	if s.events.Len() == 0 {
		s.nextArrival()
	}
	for s.events.Len() > 0 && s.events[0].t <= until {
		e := heap.Pop(&s.events).(event)
		s.now = e.t
		switch e.kind {
		case 0:
			s.nextArrival()
			r := &req{arrive: s.now}
			if s.share != nil {
				r.share = s.share(s.rng)
			}
			before := s.lim.Limit()
			ok, _, _ := s.lim.Acquire(1, r.share)
			if !ok {
				s.refused[r.share]++
				continue
			}
			s.admitted[r.share]++
			if s.refuseLater > 0 && s.lim.Inflight() > 80 && s.rng.Float64() < s.refuseLater {
				s.release(r, s.now, s.naive)
				s.note(before)
				continue
			}
			if s.delay != nil {
				r.extra = s.delay(s.now)
			}
			if s.cancel > 0 && len(s.queue) > 0 && s.rng.Float64() < s.cancel {
				r.cancelled = true
				s.push(s.now+int64(s.cancelAfter), 2, r)
			}
			if s.busy < s.workers {
				s.busy++
				s.push(s.now+s.serviceTime()+int64(r.extra), 1, r)
			} else {
				s.queue = append(s.queue, r)
			}
		case 1:
			r := e.r
			if !r.released {
				if r.arrive >= s.record {
					s.rts = append(s.rts, time.Duration(s.now-r.arrive))
				}
				s.release(r, s.now, true)
			}
			if len(s.queue) > 0 {
				n := s.queue[0]
				s.queue = s.queue[1:]
				s.push(s.now+s.serviceTime()+int64(n.extra), 1, n)
			} else {
				s.busy--
			}
		case 2:
			s.release(e.r, s.now, s.naive)
		}
	}
	s.now = until
}

func (s *server) release(r *req, end int64, sample bool) {
	if r.released {
		return
	}
	r.released = true
	before := s.lim.Limit()
	s.lim.Release(r.arrive, end, 1, sample)
	s.note(before)
}

func (s *server) note(before int64) {
	if l := s.lim.Limit(); l != before || len(s.trace) == 0 {
		s.trace = append(s.trace, point{s.now, l})
	}
}

// limitAt returns the limit in force at t.
func (s *server) limitAt(t int64) int64 {
	l := s.lim.cfg.Initial
	for _, p := range s.trace {
		if p.t > t {
			break
		}
		l = p.limit
	}
	return l
}

// limits returns the limits in force during [from, to), with the one in
// force at from.
func (s *server) limits(from, to int64) []int64 {
	out := []int64{s.limitAt(from)}
	for _, p := range s.trace {
		if p.t > from && p.t < to {
			out = append(out, p.limit)
		}
	}
	return out
}

// meanLimit is the time-weighted mean limit over [from, to), probes
// included.
func (s *server) meanLimit(from, to int64) float64 {
	cur, at, sum := float64(s.limitAt(from)), from, 0.0
	for _, p := range s.trace {
		if p.t <= from {
			continue
		}
		if p.t >= to {
			break
		}
		sum += cur * float64(p.t-at)
		cur, at = float64(p.limit), p.t
	}
	sum += cur * float64(to-at)
	return sum / float64(to-from)
}

func (s *server) p99() time.Duration {
	if len(s.rts) == 0 {
		return 0
	}
	x := slices.Clone(s.rts)
	slices.Sort(x)
	return x[int(math.Ceil(0.99*float64(len(x))))-1]
}

func newServer(seed uint64, cfg Config, workers int, service time.Duration, load float64) *server {
	seq = 0
	return &server{
		lim:     New(cfg, 0),
		rng:     rand.New(rand.NewPCG(seed, seed^0x5eed)),
		workers: workers, service: service,
		rate: load * float64(workers) / service.Seconds(),
	}
}
