// Command adaptive shows an adaptive concurrency rule finding the right
// limit by itself, beside static limits set too low and too high.
//
// The service is simulated, so the run is the same on every host and takes
// well under a second: 50 workers take 10 ms per request (±10%), serving
// requests first come first served and queueing the others, so it completes
// at most 5,000 requests/s and can have 50 in flight without queueing
// (throughput × no-load RT, Little's law). Clients offer three times that.
// At 10 s the service becomes twice as slow (each request now takes 20 ms),
// for good. Time is a manual clock the simulation moves from event to
// event; every admission goes through a real engine (Entry, Exit).
//
// Each configuration prints, per second: the limit in force, the requests
// served, and the p99 response time of those served. A static limit of 10
// wastes four fifths of the service; one of 1000 lets a queue of a thousand
// build up (a p99 of 200 ms, twenty times the no-load RT); the adaptive rule
// settles near 50 with a p99 near the no-load RT, and after the slowdown settles near 50 again at the
// new RT (the service's concurrency did not change, its speed did).
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func main() {
	seconds := flag.Int("seconds", 20, "simulated seconds per configuration")
	flag.Parse()
	if err := run(os.Stdout, *seconds); err != nil {
		fmt.Fprintln(os.Stderr, "adaptive:", err)
		os.Exit(1)
	}
}

const (
	workers = 50
	service = 10 * time.Millisecond
	load    = 3.0
	slowAt  = 10 * time.Second
)

// result is what one configuration measured, per simulated second.
type result struct {
	name   string
	limit  []int64
	served []int
	p99    []time.Duration
}

func run(w io.Writer, seconds int) error {
	configs := []struct {
		name string
		rule rules.Flow
	}{
		{"static 10", rules.Flow{Resource: "svc", Metric: rules.Concurrency, Threshold: 10}},
		{"static 1000", rules.Flow{Resource: "svc", Metric: rules.Concurrency, Threshold: 1000}},
		{"adaptive", rules.Flow{Resource: "svc", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1, Max: 1000, Initial: 10}}},
	}
	for _, c := range configs {
		r, err := simulate(c.name, c.rule, seconds)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s (service twice as slow from %v):\n  second  limit  served  p99\n", r.name, slowAt)
		for s := range r.served {
			fmt.Fprintf(w, "  %6d  %5d  %6d  %v\n", s+1, r.limit[s], r.served[s], r.p99[s].Round(time.Millisecond))
		}
	}
	return nil
}

// simulate runs the service under rule for seconds simulated seconds.
func simulate(name string, rule rules.Flow, seconds int) (*result, error) {
	start := int64(time.Hour)
	clk := sluicetest.NewManualClock(start)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{rule}}); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rate := load * workers / service.Seconds()
	s := &sim{}
	s.push(start, nil)
	busy := 0
	var queue []*call
	res := &result{name: name}
	var rts []time.Duration
	second := start + int64(time.Second)
	end := start + int64(seconds)*int64(time.Second)
	serve := func(c *call, now int64) {
		d := float64(service) * (0.9 + 0.2*rng.Float64())
		if now-start >= int64(slowAt) {
			d *= 2
		}
		s.push(now+int64(d), c)
	}
	for s.Len() > 0 {
		e := heap.Pop(s).(event)
		for e.t >= second && second <= end {
			clk.Set(second)
			snap, _ := eng.Snapshot("svc")
			lim := snap.AdaptiveLimit
			if lim == 0 {
				lim = int64(rule.Threshold)
			}
			res.limit = append(res.limit, lim)
			res.served = append(res.served, len(rts))
			res.p99 = append(res.p99, p99(rts))
			rts = rts[:0]
			second += int64(time.Second)
		}
		if e.t > end {
			break
		}
		clk.Set(e.t)
		if e.c == nil { // an arrival
			s.push(e.t+int64(rng.ExpFloat64()/rate*1e9), nil)
			p, err := eng.Entry("svc")
			if err != nil {
				continue // refused at once
			}
			c := &call{p: p, start: e.t}
			if busy < workers {
				busy++
				serve(c, e.t)
			} else {
				queue = append(queue, c)
			}
			continue
		}
		e.c.p.Exit()
		rts = append(rts, time.Duration(e.t-e.c.start))
		if len(queue) > 0 {
			serve(queue[0], e.t)
			queue = queue[1:]
		} else {
			busy--
		}
	}
	return res, nil
}

func p99(rts []time.Duration) time.Duration {
	if len(rts) == 0 {
		return 0
	}
	x := slices.Clone(rts)
	slices.Sort(x)
	return x[(len(x)*99+99)/100-1]
}

// call is an admitted request.
type call struct {
	p     sluice.Pass
	start int64
}

// event is an arrival (c nil) or the end of c's service at t.
type event struct {
	t   int64
	c   *call
	seq int
}

// sim is the simulation's events, earliest first.
type sim struct {
	ev  []event
	seq int
}

func (s *sim) push(t int64, c *call) {
	s.seq++
	heap.Push(s, event{t: t, c: c, seq: s.seq})
}

func (s *sim) Len() int { return len(s.ev) }
func (s *sim) Less(i, j int) bool {
	if s.ev[i].t != s.ev[j].t {
		return s.ev[i].t < s.ev[j].t
	}
	return s.ev[i].seq < s.ev[j].seq
}
func (s *sim) Swap(i, j int) { s.ev[i], s.ev[j] = s.ev[j], s.ev[i] }
func (s *sim) Push(x any)    { s.ev = append(s.ev, x.(event)) }
func (s *sim) Pop() any {
	e := s.ev[len(s.ev)-1]
	s.ev = s.ev[:len(s.ev)-1]
	return e
}
