package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Fastest-chunk ratios (-fastest): on a host too busy for the rounds'
// medians to hold still, each ratio is measured again serially in one
// goroutine, both paths set up at once and run in alternating chunks of
// fastChunk calls, fastChunks chunks each, and each path's time is that of
// its fastest chunk. A busy host lengthens a chunk only when it preempts
// or slows the goroutine during it, so among many short chunks some run
// undisturbed on both sides; the root module's TestAllocRegressionSpeedRatio
// checks the pass path this way.
const (
	fastChunk  = 1000
	fastChunks = 300
)

// fastestRatio returns num's and den's fastest chunk times per call, in ns.
func fastestRatio(num, den path) (numNs, denNs float64, err error) {
	var ops [2]func() error
	for k, p := range []path{num, den} {
		newOp, done, err := p.setup()
		if err != nil {
			return 0, 0, fmt.Errorf("%s: setup: %w", p.name, err)
		}
		defer done()
		ops[k] = newOp()
	}
	blocked := [2]bool{num.blocked, den.blocked}
	best := [2]time.Duration{1 << 62, 1 << 62}
	for c := 0; c < fastChunks; c++ {
		for k, op := range ops {
			start := time.Now()
			for i := 0; i < fastChunk; i++ {
				if err := op(); (err != nil) != blocked[k] {
					return 0, 0, fmt.Errorf("unexpected outcome %v", err)
				}
			}
			best[k] = min(best[k], time.Since(start))
		}
	}
	return float64(best[0]) / fastChunk, float64(best[1]) / fastChunk, nil
}

// printFastest measures and prints every ratio whose paths are measured.
func printFastest(out io.Writer, measured map[string]bool) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "fastest-chunk ratio, serial\tratio\tnum ns\tden ns\t")
	for _, q := range ratios {
		if !measured[q.num.name] || !measured[q.den.name] {
			continue
		}
		n, d, err := fastestRatio(q.num, q.den)
		if err != nil {
			return fmt.Errorf("%s: %w", q.label, err)
		}
		if q.diff {
			fmt.Fprintf(w, "%s\t%+.0f ns\t%.1f\t%.1f\t\n", q.label, n-d, n, d)
		} else {
			fmt.Fprintf(w, "%s\t%.2fx\t%.1f\t%.1f\t\n", q.label, n/d, n, d)
		}
	}
	return w.Flush()
}
