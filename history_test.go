package sluice

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// exitAfter makes an entry of res, advances clk by rt, records err and
// exits it. It reports whether the entry passed.
func exitAfter(g *Engine, clk *sluicetest.ManualClock, res string, rt time.Duration, err error, opts ...EntryOption) bool {
	p, e := g.Entry(res, opts...)
	if e != nil {
		return false
	}
	clk.Advance(rt)
	p.SetError(err)
	p.Exit()
	return true
}

func TestHistoryExactSeconds(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4})
	boom := errors.New("boom")

	// Second 0: RTs of 10, 20 and 30 ms (the last failed), then one
	// refused and one passed at the last bucket's end.
	require.True(t, exitAfter(g, clk, "r", 10*time.Millisecond, nil))
	require.True(t, exitAfter(g, clk, "r", 20*time.Millisecond, nil))
	require.True(t, exitAfter(g, clk, "r", 30*time.Millisecond, boom))
	clk.Set(int64(999 * time.Millisecond))
	require.True(t, exitAfter(g, clk, "r", 0, nil))
	require.False(t, try(g, "r"))
	// Second 1: quiet. Second 2: a batch of 3 that passes and exits in
	// second 3 after 1.5 s, and a batch of 2 refused.
	clk.Set(int64(2 * time.Second))
	p, err := g.Entry("r", WithBatch(3))
	require.NoError(t, err)
	require.False(t, try(g, "r", WithBatch(2)))
	clk.Advance(1500 * time.Millisecond)
	p.Exit()
	// A reload that changes the rule leaves the statistics alone.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 100})
	clk.Set(int64(4*time.Second + 500*time.Millisecond))

	got := g.History("r", time.Minute)
	want := []stat.Second{
		{Start: 0, Pass: 4, Block: 1, Complete: 4, Error: 1, AvgRT: 15 * time.Millisecond, MinRT: 0, MeanConcurrency: 0.06, MaxConcurrency: 1},
		{Start: int64(time.Second)},
		{Start: int64(2 * time.Second), Pass: 3, Block: 2, MaxConcurrency: 3},
		// In flight from its start, none passed in it.
		{Start: int64(3 * time.Second), Complete: 3, AvgRT: 1500 * time.Millisecond, MinRT: 1500 * time.Millisecond, MeanConcurrency: 4.5, MaxConcurrency: 3},
	}
	assert.Equal(t, want, got)
	// since bounds the seconds, newest kept.
	assert.Equal(t, want[2:], g.History("r", 2*time.Second))
	assert.Equal(t, want[3:], g.History("r", 1500*time.Millisecond))
	assert.Nil(t, g.History("r", 0))
	assert.Nil(t, g.History("nope", time.Minute))
}

// TestHistoryRollsOver runs one entry per second (and a second one every
// tenth second) for seven minutes, across the minute window's and the
// history window's slot reuse, and checks every second of the last five
// minutes, then again after a quiet spell.
func TestHistoryRollsOver(t *testing.T) {
	g, clk := newTestEngine(t, 0, WithHistory(5*time.Minute))
	const secs = 420
	for s := 0; s < secs; s++ {
		clk.Set(int64(s)*int64(time.Second) + int64(300*time.Millisecond))
		require.True(t, exitAfter(g, clk, "r", time.Millisecond, nil))
		if s == 0 {
			// A reader asks for more than a minute: from now on the
			// resource keeps its five minutes (see Engine.History).
			g.History("r", time.Hour)
		}
		if s%10 == 0 {
			require.True(t, exitAfter(g, clk, "r", 3*time.Millisecond, nil))
		}
		if s == 200 {
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1000})
		}
	}
	check := func(t *testing.T, newest int) {
		h := g.History("r", time.Hour)
		require.Len(t, h, 300)
		for i, s := range h {
			sec := newest - 299 + i
			want := stat.Second{Start: int64(sec) * int64(time.Second)}
			if sec < secs {
				want.Pass, want.Complete, want.AvgRT, want.MinRT = 1, 1, time.Millisecond, time.Millisecond
				want.MeanConcurrency, want.MaxConcurrency = 0.001, 1
				if sec%10 == 0 {
					want.Pass, want.Complete, want.AvgRT = 2, 2, 2*time.Millisecond
					want.MeanConcurrency = 0.004
				}
			}
			require.Equal(t, want, s, "second %d", sec)
		}
	}
	clk.Set(secs * int64(time.Second))
	check(t, secs-1)
	// Quiet for four minutes: nothing retires, the old seconds stay
	// readable until they are older than five minutes.
	clk.Advance(4 * time.Minute)
	check(t, secs-1+240)
	s, _ := g.Snapshot("r")
	assert.Equal(t, uint64(secs+secs/10), s.TotalPass, "every entry counted once")
}

func TestHistoryLengths(t *testing.T) {
	for _, tt := range []struct {
		keep time.Duration
		want int
	}{{0, 0}, {-time.Second, 0}, {30 * time.Second, 30}, {1500 * time.Millisecond, 2}, {64 * time.Second, 64}, {65 * time.Second, 65}, {2 * time.Hour, 3600}} {
		t.Run(tt.keep.String(), func(t *testing.T) {
			g, clk := newTestEngine(t, 0, WithHistory(tt.keep))
			require.True(t, try(g, "r"))
			clk.Set(int64(2 * time.Hour))
			h := g.History("r", 3*time.Hour)
			assert.Len(t, h, tt.want)
			if tt.want > 0 {
				assert.Equal(t, int64(2*time.Hour-time.Second), h[len(h)-1].Start)
			}
		})
	}
	g, clk := newTestEngine(t, 0)
	require.True(t, try(g, "r"))
	clk.Advance(time.Hour)
	assert.Len(t, g.History("r", time.Hour), int(defaultHistory/time.Second), "default")
}

// TestHistoryMemory reports what history costs a resource once a reader
// asked for it, and checks it against WithHistory's documented figures:
// the minute window's extras (MinRT and MaxConcurrency of its 64 seconds,
// 512 bytes, which History makes and a resource without history never
// does), and 56 bytes per second beyond the minute window's 64, rounded up
// to a power of two.
func TestHistoryMemory(t *testing.T) {
	// The least of three runs: another goroutine's allocations can only
	// add to a run's count.
	perResource := func(keep time.Duration) uint64 {
		least := ^uint64(0)
		for run := 0; run < 3; run++ {
			least = min(least, allocPerResource(keep))
		}
		return least
	}
	const minuteExtras = 64 * 8
	base := perResource(0)
	t.Logf("a resource without history: %d bytes", base)
	for _, tt := range []struct {
		keep time.Duration
		want uint64
	}{{time.Minute, minuteExtras}, {defaultHistory, minuteExtras + 256*56}, {time.Hour, minuteExtras + 4096*56}} {
		extra := int64(perResource(tt.keep)) - int64(base)
		t.Logf("history of %v: %d bytes more per resource", tt.keep, extra)
		assert.GreaterOrEqual(t, extra, int64(tt.want)-128, "%v", tt.keep) // names, map growth: a few bytes either way
		assert.LessOrEqual(t, extra, int64(tt.want)+256, "%v", tt.keep)
	}
}

// allocPerResource returns the bytes allocated to make one resource whose
// history is keep (the mean of 50).
func allocPerResource(keep time.Duration) uint64 {
	const n = 50
	keepAlive := make([]*resource, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range keepAlive {
		keepAlive[i] = newResourceHistory(fmt.Sprint("resource-", i), keep)
		keepAlive[i].node.MinuteSum(0, 0)  // a reader asks: the minute window is made
		keepAlive[i].node.History(0, keep) // and the history window beyond it
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keepAlive)
	return (after.TotalAlloc - before.TotalAlloc) / n
}

// TestHistoryConcurrent reads history while goroutines enter across
// second boundaries; once they stop, every entry is in exactly one second.
func TestHistoryConcurrent(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	const workers, per = 4, 500
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < per; i++ {
				try(g, "r")
			}
		}()
	}
	// The clock moves while the workers run, but never past 50 s: on a
	// busy host the workers can be slow enough for an unbounded loop to
	// push their first seconds out of the minute read below.
	stopped, moved := 0, time.Duration(0)
	for stopped < workers {
		if moved >= 50*time.Second {
			<-done
			stopped++
			continue
		}
		select {
		case <-done:
			stopped++
		default:
			clk.Advance(7 * time.Millisecond)
			moved += 7 * time.Millisecond
			_ = g.History("r", time.Minute)
		}
	}
	clk.Advance(2 * time.Second)
	var pass, complete uint64
	for _, s := range g.History("r", time.Minute) {
		pass += s.Pass
		complete += s.Complete
	}
	assert.Equal(t, uint64(workers*per), pass)
	assert.Equal(t, uint64(workers*per), complete)
}

// TestHistoryMaxConcurrencyConcurrent: goroutines that each hold at most
// one entry never make a second's maximum exceed their number, and reach
// it in the second where all of them hold one at once.
func TestHistoryMaxConcurrencyConcurrent(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	const workers, per = 4, 300
	var all sync.WaitGroup // every worker holds an entry (second 0)
	all.Add(workers)
	release := make(chan struct{})
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			p, err := g.Entry("r")
			all.Done()
			<-release
			if err == nil {
				p.Exit()
			}
			for i := 0; i < per; i++ {
				try(g, "r")
			}
		}()
	}
	all.Wait()
	clk.Set(int64(time.Second))
	close(release)
	stopped := 0
	for stopped < workers {
		select {
		case <-done:
			stopped++
		default:
			clk.Advance(3 * time.Millisecond)
			_ = g.History("r", time.Minute)
		}
	}
	clk.Advance(2 * time.Second)
	h := g.History("r", time.Minute)
	require.NotEmpty(t, h)
	assert.Equal(t, int64(workers), h[0].MaxConcurrency, "second 0: all held one at once")
	for _, s := range h {
		assert.LessOrEqual(t, s.MaxConcurrency, int64(workers), "second %ds", s.Start/int64(time.Second))
		assert.GreaterOrEqual(t, s.MaxConcurrency, int64(0))
	}
}
