// Command observe shows what an engine tells about the traffic it
// protects: the event stream (Engine.Subscribe), the block log
// (sluice.WithBlockLog), snapshots (Engine.Snapshot) and per-second
// history (Engine.History).
//
//	go run ./examples/observe
//
// For three seconds, 8 orders a second arrive at GET /orders, limited to 5
// a second by a flow rule; each order admitted calls a payments dependency
// behind a circuit breaker, and payments fail for the first second and a
// half. The program prints, in the order they come: the events (rules
// loaded, a bad rule set refused, each breaker transition), the block log's
// summary of each second's refusals, and a snapshot of each resource at the
// end of each second. Then it prints the history of GET /orders, second by
// second, and the totals of a final snapshot.
//
// The engine reads a manual clock (sluicetest.NewManualClock) that the
// program moves, so the figures are the same on every run and the run takes
// a moment; only the block log's wall-clock times differ. A service leaves
// sluice.WithClock out.
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

const (
	orders   = "GET /orders"
	payments = "payments"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	clk := sluicetest.NewManualClock(0)
	now := func() time.Duration { return time.Duration(clk.Nanotime()) }

	// The block log: one record per resource, rule and second, written at
	// the first refusal of a later second or at the next read (Snapshot,
	// History). The records' time attributes are left out to keep the lines
	// short.
	blockLog := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "second" {
				return slog.Attr{}
			}
			return a
		},
	}))
	eng := sluice.New(sluice.WithClock(clk), sluice.WithBlockLog(blockLog))
	defer eng.Close()

	// Events: rule loads and refusals, breaker transitions (and system
	// shedding, cluster fallback, watches), once each, in order.
	cancel := eng.Subscribe(func(ev stat.Event) {
		switch ev.Kind {
		case stat.EventBreaker: // Value: the error ratio that opened it, a failed probe's ms, the probes that closed it
			fmt.Fprintf(w, "%7v  event %s: %s %s -> %s (%g)\n", now(), ev.Kind, ev.Resource, ev.From, ev.To, ev.Value)
		case stat.EventRulesRefused:
			fmt.Fprintf(w, "%7v  event %s: %v\n", now(), ev.Kind, ev.Err)
		default:
			fmt.Fprintf(w, "%7v  event %s: %s\n", now(), ev.Kind, ev.RuleKind)
		}
	})
	defer cancel()

	set := rules.Set{
		Flow: []rules.Flow{{ID: "orders", Resource: orders, Threshold: 5}},
		CircuitBreaker: []rules.CircuitBreaker{{ID: "payments", Resource: payments, Strategy: rules.ErrorRatio,
			Threshold: 0.5, MinRequestAmount: 3, StatInterval: time.Second, RetryTimeout: 500 * time.Millisecond}},
	}
	if err := eng.LoadRules(set); err != nil {
		return err
	}
	// A bad set is refused whole (an event says why); the rules in force stay.
	bad := rules.Set{Flow: []rules.Flow{{Resource: orders, Threshold: -5}}}
	if err := eng.LoadRules(bad); err == nil {
		return errors.New("observe: a negative threshold was accepted")
	}

	// Three seconds of traffic: an order every 125 ms, taking 20 ms.
	for sec := time.Duration(0); sec < 3*time.Second; sec += time.Second {
		for at := sec; at < sec+time.Second; at += 125 * time.Millisecond {
			clk.Set(int64(at))
			order(eng, clk, at < 1500*time.Millisecond)
		}
		// Near the end of the second, what a dashboard would poll: the last
		// second's rates. (The first read of a resource also starts its
		// history, which keeps every second from then on.)
		clk.Set(int64(sec + 950*time.Millisecond))
		for _, r := range []string{orders, payments} {
			if s, ok := eng.Snapshot(r); ok {
				fmt.Fprintf(w, "%7v  snapshot %s: %g passed/s, %g refused/s, %g errors/s, avg RT %v\n",
					now(), r, s.PassQPS, s.BlockQPS, s.ErrorQPS, s.AvgRT)
			}
		}
	}
	clk.Set(int64(3 * time.Second))

	history := eng.History(orders, time.Minute) // []stat.Second, one per completed second
	fmt.Fprintf(w, "\nHistory of %s, oldest second first:\n", orders)
	fmt.Fprintf(w, "%6s %6s %8s %6s %8s\n", "second", "passed", "refused", "errors", "avg RT")
	for _, s := range history {
		fmt.Fprintf(w, "%6v %6d %8d %6d %8v\n", time.Duration(s.Start), s.Pass, s.Block, s.Error, s.AvgRT)
	}
	for _, r := range []string{orders, payments} {
		s, _ := eng.Snapshot(r)
		fmt.Fprintf(w, "%s since start: %d passed, %d refused (%d by flow rules, %d by circuit breakers), %d errors\n",
			r, s.TotalPass, s.TotalBlock, s.BlockedBy[sluice.BlockFlow], s.BlockedBy[sluice.BlockDegrade], s.TotalError)
	}
	return nil
}

// order is one request to GET /orders: if admitted, it calls payments
// (failing while down), and each call takes 10 ms.
func order(eng *sluice.Engine, clk *sluicetest.ManualClock, down bool) {
	p, err := eng.Entry(orders)
	if err != nil {
		return // refused by the flow rule: the block log counts it
	}
	defer p.Exit()
	clk.Advance(10 * time.Millisecond)
	err = eng.Do(payments, func() error {
		clk.Advance(10 * time.Millisecond)
		if down {
			return errors.New("payment provider down")
		}
		return nil
	}, sluice.WithTraffic(sluice.Outbound))
	if err != nil {
		p.SetError(err)
	}
}
