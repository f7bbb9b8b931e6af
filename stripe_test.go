package sluice

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestStripedResourceExactAcrossReloads: 64 goroutines enter and exit one
// resource whose node counts in stripes (made part way, in the middle of
// a bucket, as contention makes them), on a manual clock that crosses
// bucket and second boundaries, while the QPS rule is reloaded. No second
// admits more than the threshold (the admission check is not striped),
// and the node's figures (Snapshot's totals and concurrency, the
// one-second pass count, History's passes and exits) are the exact counts
// of what the goroutines did.
func TestStripedResourceExactAcrossReloads(t *testing.T) {
	const T, workers, per, step = 50, 64, 60, int64(110 * time.Millisecond)
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{ID: "v0", Resource: "r", Threshold: T})
	g.Snapshot("r") // read: exits are timed in a sample, History kept
	var passed atomic.Int64
	var entered atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				for clk.Nanotime() < int64(i)*step {
					runtime.Gosched() // the clock moves on below
				}
				if entered.Add(1) == workers*per/3 {
					g.reg.get("r").node.Stripe()
				}
				if try(g, "r") {
					passed.Add(1)
				}
			}
		}()
	}
	// The clock moves on in steps of 110 ms (a bucket and a tenth); the
	// goroutines' i-th entries wait for the i-th step.
	var ticking sync.WaitGroup
	ticking.Add(1)
	go func() {
		defer ticking.Done()
		for i := 1; i <= per; i++ {
			for entered.Load() < int64(workers*i)/2 {
				runtime.Gosched() // half the workers are at step i
			}
			clk.Advance(time.Duration(step))
		}
	}()
	stop := make(chan struct{})
	var reloads sync.WaitGroup
	reloads.Add(1)
	go func() {
		defer reloads.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := loadFlow(g, []rules.Flow{{ID: fmt.Sprintf("v%d", i), Resource: "r", Threshold: T}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	ticking.Wait()
	close(stop)
	reloads.Wait()
	secs := clk.Nanotime() / int64(time.Second)
	require.True(t, g.reg.get("r").node.Striped())
	t.Logf("%d of %d passed over %d seconds", passed.Load(), workers*per, secs)
	require.LessOrEqual(t, passed.Load(), T*(secs+1), "at most T a second")
	clk.Advance(2 * time.Second)
	s, _ := g.Snapshot("r")
	require.Equal(t, uint64(passed.Load()), s.TotalPass)
	require.Equal(t, uint64(passed.Load()), s.TotalComplete)
	require.Equal(t, uint64(workers*per)-uint64(passed.Load()), s.TotalBlock)
	require.Zero(t, s.Concurrency)
	var pass, complete uint64
	for _, sec := range g.History("r", time.Minute) {
		require.LessOrEqual(t, sec.Pass, uint64(T), "second %d", sec.Start/int64(time.Second))
		pass += sec.Pass
		complete += sec.Complete
	}
	require.Equal(t, uint64(passed.Load()), pass)
	require.Equal(t, uint64(passed.Load()), complete)
}
