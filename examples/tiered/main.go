// Command tiered shows a tiered limit: a simulated service on a manual
// clock takes 1,000 requests a second while its dependency slows down
// (response times of 50, 150, 250 then 70 ms, three seconds each). Its
// flow rule admits everything while the average response time is low,
// 500 a second above 100 ms, 200 a second above 200 ms, and goes back down
// a step only when the average falls below 80 ms (180 ms for the second
// step). It prints each second's admissions, average RT and step, and the
// moves as the engine reports them, and exits; the output is the same on
// every run.
//
//	go run ./examples/tiered
package main

import (
	"container/heap"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// inFlight are the admitted requests by the time they end.
type inFlight []struct {
	end int64
	p   sluice.Pass
}

func (h inFlight) Len() int           { return len(h) }
func (h inFlight) Less(i, j int) bool { return h[i].end < h[j].end }
func (h inFlight) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *inFlight) Push(x any) {
	*h = append(*h, x.(struct {
		end int64
		p   sluice.Pass
	}))
}
func (h *inFlight) Pop() any { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

func run(w io.Writer) error {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk), sluice.WithHistory(time.Minute))
	defer eng.Close()
	cancel := eng.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventTier {
			fmt.Fprintf(w, "        at %v: step %s -> %s (average RT %.0f ms)\n", time.Duration(e.At), e.From, e.To, e.Value)
		}
	})
	defer cancel()
	err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{
		Resource: "GET /search",
		// Threshold 0: no limit below the first step.
		Tiers: []rules.Tier{
			{Above: 100, Below: 80, Threshold: 500},
			{Above: 200, Below: 180, Threshold: 200},
		},
	}}})
	if err != nil {
		return err
	}
	rts := []time.Duration{50, 150, 250, 70} // ms, three seconds each
	var flying inFlight
	fmt.Fprintln(w, "second  RT now  admitted  avg RT  step")
	for sec := int64(0); sec < 12; sec++ {
		rt := rts[sec/3] * time.Millisecond
		admitted := 0
		for i := int64(0); i < 1000; i++ {
			now := sec*int64(time.Second) + i*int64(time.Millisecond)
			for len(flying) > 0 && flying[0].end <= now {
				f := heap.Pop(&flying).(struct {
					end int64
					p   sluice.Pass
				})
				clk.Set(f.end)
				f.p.Exit()
			}
			clk.Set(now)
			if p, err := eng.Entry("GET /search"); err == nil {
				admitted++
				heap.Push(&flying, struct {
					end int64
					p   sluice.Pass
				}{now + int64(rt), p})
			}
		}
		clk.Set((sec + 1) * int64(time.Second))
		s, _ := eng.Snapshot("GET /search")
		h := eng.History("GET /search", time.Second)
		fmt.Fprintf(w, "%6d  %6v  %8d  %6v  %4d\n", sec, rt, admitted, h[len(h)-1].AvgRT.Round(time.Millisecond), s.Tier)
	}
	return nil
}
