// Command shadow rolls a limit out in shadow mode: a simulated service on
// a manual clock takes 300 requests a second; a flow rule of 200 a second
// is loaded with Shadow set, so it refuses nothing and counts what it
// would refuse; after three seconds one field flips and the same rule,
// with the count it kept, is enforced. It prints one line per second and
// exits; the output is the same on every run.
//
//	go run ./examples/shadow
package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func main() {
	if err := run(os.Stdout, 6); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run simulates secs seconds, flipping the rule to enforced half way.
func run(w io.Writer, secs int) error {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk), sluice.WithHistory(time.Minute))
	defer eng.Close()
	rule := rules.Flow{ID: "checkout-200", Resource: "POST /checkout", Threshold: 200, Shadow: true}
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{rule}}); err != nil {
		return err
	}
	fmt.Fprintln(w, "second  mode      passed  refused  would-refuse")
	for sec := 0; sec < secs; sec++ {
		if sec == secs/2 {
			rule.Shadow = false // the one field that enforces it
			if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{rule}}); err != nil {
				return err
			}
		}
		var passed, refused int
		for i := 0; i < 300; i++ { // one request every 3.33 ms
			clk.Set(int64(sec)*int64(time.Second) + int64(i)*int64(time.Second)/300)
			p, err := eng.Entry("POST /checkout")
			if err != nil {
				refused++
				continue
			}
			passed++
			p.Exit()
		}
		clk.Set(int64(sec+1) * int64(time.Second))
		h := eng.History("POST /checkout", time.Second)
		mode := "shadow"
		if !rule.Shadow {
			mode = "enforced"
		}
		fmt.Fprintf(w, "%6d  %-8s  %6d  %7d  %12d\n", sec, mode, passed, refused, h[len(h)-1].ShadowBlock)
	}
	s, _ := eng.Snapshot("POST /checkout")
	fmt.Fprintf(w, "totals: passed %d, refused %d, would have refused in shadow mode %d\n",
		s.TotalPass, s.TotalBlock, s.ShadowBlockedBy[sluice.BlockFlow])
	return nil
}
