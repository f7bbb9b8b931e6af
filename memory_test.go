package sluice

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// liveHeap returns the live heap after full collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// resourceMemory returns the live heap bytes per resource of an engine with
// default settings (five minutes of history) holding n resources, each with
// a flow rule when withRules is set, that counted traffic: one entry each
// (a burst), or, when sustained is set, entries at 0, 1.6 s and 3.2 s,
// each of which reuses the second-level slot of the one before and so
// retires its second into the resource's minute window.
func resourceMemory(t testing.TB, n int, withRules, sustained bool) float64 {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
	}
	base := liveHeap()
	g, clk := newTestEngine(t, 0, WithMaxResources(n+10), WithMaxRules(n))
	if withRules {
		rs := make([]rules.Flow, n)
		for i, name := range names {
			rs[i] = rules.Flow{Resource: name, Threshold: 1e9}
		}
		mustLoadFlow(t, g, rs...)
	}
	at := []time.Duration{0}
	if sustained {
		at = sustainedTraffic
	}
	for _, d := range at {
		clk.Set(int64(d))
		for _, name := range names {
			require.True(t, try(g, name))
		}
	}
	per := float64(liveHeap()-base) / float64(n)
	runtime.KeepAlive(g)
	return per
}

var sustainedTraffic = []time.Duration{0, 1600 * time.Millisecond, 3200 * time.Millisecond}

// TestMemoryPerResource pins what a resource costs at default settings
// (five minutes of history). A five-minute ring for every resource made it
// 20.7 KB (2.06 GB for 100,000 resources); the ring beyond the minute is
// now made only for a resource whose History a reader asks for, and the
// minute window (4.2 KB) only once a resource's traffic spans more than
// the second-level window. Measured: about 1.9 KB for a resource that saw
// a burst, 6.2 KB for one with sustained traffic, 6.6 KB with a flow rule
// too (660 MB for 100,000; checked on 20,000 under -short).
func TestMemoryPerResource(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory blurs heap figures")
	}
	const n = 20000
	burst := resourceMemory(t, n, true, false)
	bare := resourceMemory(t, n, false, true)
	ruled := resourceMemory(t, n, true, true)
	t.Logf("bytes per resource: a burst with a flow rule %.0f; sustained traffic %.0f; and a flow rule %.0f", burst, bare, ruled)
	assert.Less(t, burst, 3500.0)
	assert.Less(t, bare, 8000.0)
	assert.Less(t, ruled, 8500.0)
	if testing.Short() {
		return
	}
	const big = 100000
	total := resourceMemory(t, big, true, true) * big
	t.Logf("%d resources with a flow rule and sustained traffic each: %.0f MB", big, total/1e6)
	assert.Less(t, total, 850e6)
}

// TestMemoryTestMakesMinuteWindows: the traffic of resourceMemory makes the
// minute window it claims to measure.
func TestMemoryTestMakesMinuteWindows(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	for _, at := range sustainedTraffic {
		clk.Set(int64(at))
		require.True(t, try(g, "r"))
	}
	r := g.reg.get("r")
	require.NotNil(t, r)
	require.NotNil(t, r.node.History(int64(3200*time.Millisecond), time.Minute))
	s, _ := g.Snapshot("r")
	assert.Equal(t, uint64(3), s.MinutePass)
	assert.True(t, r.node.HasMinuteWindow(), "seconds retired into the minute window")
}
