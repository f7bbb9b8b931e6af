package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// A watch for "errors reach 250 in any minute" sees a burst that straddles
// a minute of the clock: 150 errors in the last second of one minute and
// 150 in the first second of the next.
func ExampleEngine_Watch() {
	clk := sluicetest.NewManualClock(0)
	engine := sluice.New(sluice.WithClock(clk))
	defer engine.Close()

	fired := make(chan stat.Event, 1)
	cancel := engine.Subscribe(func(ev stat.Event) {
		if ev.Kind == stat.EventWatchFired {
			fired <- ev
		}
	})
	defer cancel()
	stop, err := engine.Watch(stat.Watch{Resource: "GET /orders", Metric: stat.MetricError, Window: time.Minute, Threshold: 250})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	// Let the evaluator park on the clock before moving it.
	_ = clk.BlockUntil(context.Background(), 1)

	fail := func(n int) {
		for i := 0; i < n; i++ {
			p, err := engine.Entry("GET /orders")
			if err != nil {
				continue
			}
			p.SetError(errors.New("upstream down"))
			p.Exit()
		}
	}
	clk.Set(int64(59*time.Second + 500*time.Millisecond))
	fail(150)
	clk.Set(int64(60*time.Second + 200*time.Millisecond))
	fail(150)
	clk.Set(int64(61 * time.Second)) // second 60 has ended
	ev := <-fired
	fmt.Printf("%s: %v errors on %s in the %v before %v\n", ev.Kind, ev.Value, ev.Resource, ev.Watch.Window, time.Duration(ev.At))
	// Output: watch-fired: 300 errors on GET /orders in the 1m0s before 1m1s
}
