// Command flow shows what each behaviour of a flow rule admits, and when:
//
//	go run ./examples/flow
//
// It prints three parts.
//
//  1. Four rules of 10 requests per second, side by side, under the same
//     traffic: 20 requests a second for six seconds, two quiet seconds,
//     then a burst of 30 at once. Reject counts a sliding window; pacing
//     (throttle without a queue) admits one request per 100 ms; warm-up
//     starts a cold resource at a third of the rate and climbs; the token
//     bucket spends its stored burst first, then refills at the rate.
//  2. Throttle with a queue: 8 callers arrive together at a rule of 10 per
//     second that lets a request wait up to 500 ms. One passes at once,
//     five wait for their slots 100 ms apart, two are refused at once.
//  3. Concurrency rules as bulkheads: two calls to a stuck dependency fill
//     its two places, a third is refused, and another dependency keeps its
//     own places.
//
// The engines read a manual clock (sluicetest.NewManualClock) that the
// program moves by hand, so every run prints the same figures in a moment;
// a service leaves sluice.WithClock out and runs on the system's clock.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	if err := sideBySide(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := queue(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return bulkhead(w)
}

// sideBySide offers the same requests to four resources, each under a rule
// of 10 per second with another behaviour, and prints per second how many
// each admitted.
func sideBySide(w io.Writer) error {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	flow := []rules.Flow{
		{Resource: "reject", Threshold: 10},
		{Resource: "pacing", Threshold: 10, Throttle: &rules.Throttle{}}, // MaxQueueing 0: nobody waits
		{Resource: "warm-up", Threshold: 10, WarmUp: &rules.WarmUp{Period: 5 * time.Second}},
		{Resource: "token-bucket", Threshold: 10, Bucket: &rules.Bucket{Burst: 20}},
	}
	if err := eng.LoadRules(rules.Set{Flow: flow}); err != nil {
		return err
	}

	fmt.Fprintln(w, "Four rules of 10/s under the same traffic: requests admitted per second")
	fmt.Fprintf(w, "%6s %7s", "second", "offered")
	for _, r := range flow {
		fmt.Fprintf(w, " %12s", r.Resource)
	}
	fmt.Fprintln(w)
	for sec := 0; sec < 9; sec++ {
		offered, admitted := 0, make([]int, len(flow))
		for ms := 0; ms < 1000; ms += 10 { // in steps of 10 ms
			n := 0 // requests arriving in this step
			switch {
			case sec < 6 && ms%50 == 0:
				n = 1 // 20 a second, one every 50 ms
			case sec == 8 && ms == 0:
				n = 30 // a burst after a quiet spell
			}
			offered += n
			for range n {
				for i, r := range flow {
					if p, err := eng.Entry(r.Resource); err == nil {
						admitted[i]++
						p.Exit()
					}
				}
			}
			clk.Advance(10 * time.Millisecond)
		}
		fmt.Fprintf(w, "%6d %7d", sec, offered)
		for _, n := range admitted {
			fmt.Fprintf(w, " %12d", n)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "  reject:       at most 10 in the sliding window, the burst's first 10")
	fmt.Fprintln(w, "  pacing:       one per 100 ms, so one of a burst at one instant")
	fmt.Fprintln(w, "  warm-up:      10/3 while cold, 10 after the 5 s warm-up, cold again after the quiet spell")
	fmt.Fprintln(w, "  token-bucket: the 20 stored tokens on top of 10/s, and 20 at once after the quiet spell")
	return nil
}

// queue sends 8 callers at once to a throttle rule with a queue and prints
// when each was admitted or refused.
func queue(w io.Writer) error {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{
		Resource: "POST /orders", Threshold: 10, // a slot every 100 ms
		Throttle: &rules.Throttle{MaxQueueing: 500 * time.Millisecond},
	}}})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "Throttle, 10/s, waiting at most 500 ms: 8 callers arrive together at 0 ms")

	type outcome struct {
		at  time.Duration // the clock when Entry returned
		err error
	}
	const callers = 8
	done := make(chan outcome, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := eng.Entry("POST /orders") // waits for its slot, or is refused at once
			if err == nil {
				p.Exit()
			}
			done <- outcome{time.Duration(clk.Nanotime()), err}
		}()
	}
	print := func(o outcome) {
		var be *sluice.BlockError
		if errors.As(o.err, &be) {
			fmt.Fprintf(w, "%6v  refused at once: %s, retry after %v\n", o.at, be.Reason, be.RetryAfter)
		} else if o.at > 0 {
			fmt.Fprintf(w, "%6v  admitted after waiting %v\n", o.at, o.at)
		} else {
			fmt.Fprintf(w, "%6v  admitted at once\n", o.at)
		}
	}

	// Slot 0 is now, slots 100 ms to 500 ms are within the queue bound: one
	// caller passes, five wait on the clock, two are refused. Once the five
	// wait and the three others have answered, the clock moves.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = clk.BlockUntil(ctx, 5)
	var now []outcome
	for len(now) < callers-5 && err == nil {
		now = append(now, <-done)
	}
	sort.Slice(now, func(i, j int) bool { return now[i].err == nil && now[j].err != nil })
	for _, o := range now {
		print(o)
	}
	for range 5 { // each 100 ms releases one waiting caller
		clk.Advance(100 * time.Millisecond)
		if err == nil {
			print(<-done)
		}
	}
	if err != nil {
		clk.Advance(time.Hour) // release whoever waits before giving up
	}
	wg.Wait()
	return err
}

// bulkhead holds calls to two dependencies, each behind a concurrency rule
// of 2, and prints what each new call gets.
func bulkhead(w io.Writer) error {
	eng := sluice.New()
	defer eng.Close()
	err := eng.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "inventory", Metric: rules.Concurrency, Threshold: 2},
		{Resource: "payments", Metric: rules.Concurrency, Threshold: 2},
	}})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "Concurrency rules as bulkheads: 2 in flight per dependency")
	call := func(dep string) sluice.Pass {
		p, err := eng.Entry(dep, sluice.WithTraffic(sluice.Outbound))
		s, _ := eng.Snapshot(dep)
		if err != nil {
			fmt.Fprintf(w, "  %-9s refused: %v\n", dep, err)
		} else {
			fmt.Fprintf(w, "  %-9s admitted (%d in flight)\n", dep, s.Concurrency)
		}
		return p
	}
	// inventory hangs: its calls do not return yet.
	first := call("inventory")
	second := call("inventory")
	call("inventory")       // a third would wait on a stuck dependency: refused
	pay := call("payments") // payments keep their own places
	first.Exit()
	fmt.Fprintln(w, "  inventory call returns")
	third := call("inventory")
	for _, p := range []sluice.Pass{second, third, pay} {
		p.Exit()
	}
	return nil
}
