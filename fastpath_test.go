package sluice

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
	"github.com/sluice-go/sluice/sluicetest"
)

// fastThreshold returns the threshold of the fast check in force on the
// resource, and false when calls on it run the full checks.
func fastThreshold(t *testing.T, g *Engine, name string) (float64, bool) {
	t.Helper()
	x := g.reg.get(name)
	require.NotNil(t, x, name)
	f := x.fast.Load()
	return math.Float64frombits(f), f != 0
}

// TestFastCheckOnlyForASingleOneSecondRejectRule checks which rule sets get
// the fast check: exactly a lone QPS reject rule over the default interval
// that counts in its resource's own window, and it follows reloads both
// ways.
func TestFastCheckOnlyForASingleOneSecondRejectRule(t *testing.T) {
	g := New(WithClock(sluicetest.NewManualClock(0)))
	defer g.Close()
	plain := rules.Flow{Resource: "a", Threshold: 10}

	mustLoadFlow(t, g, plain)
	thr, ok := fastThreshold(t, g, "a")
	require.True(t, ok)
	require.Equal(t, 10.0, thr)

	plain.Threshold = 25 // same window, new threshold
	mustLoadFlow(t, g, plain)
	thr, ok = fastThreshold(t, g, "a")
	require.True(t, ok)
	require.Equal(t, 25.0, thr)

	for _, tc := range []struct {
		name  string
		rules []rules.Flow
	}{
		{"two rules", []rules.Flow{plain, {Resource: "a", Threshold: 100, StatInterval: time.Minute}}},
		{"throttle", []rules.Flow{{Resource: "a", Threshold: 10, Behavior: rules.Throttle}}},
		{"concurrency", []rules.Flow{{Resource: "a", Threshold: 10, Metric: rules.Concurrency}}},
		{"associated", []rules.Flow{{Resource: "a", Threshold: 10, RefResource: "b"}}},
		{"warm-up", []rules.Flow{{Resource: "a", Threshold: 10, Strategy: rules.WarmUp, WarmUpPeriod: time.Second}}},
		{"other interval", []rules.Flow{{Resource: "a", Threshold: 10, StatInterval: 2 * time.Second}}},
		{"none", nil},
	} {
		mustLoadFlow(t, g, tc.rules...)
		_, ok := fastThreshold(t, g, "a")
		require.False(t, ok, tc.name)
		mustLoadFlow(t, g, plain)
		_, ok = fastThreshold(t, g, "a")
		require.True(t, ok, "back to a lone rule after %s", tc.name)
	}

	// Any other kind of rule on the resource turns it off, and removing
	// that rule turns it back on.
	_, err := g.LoadIsolationRules([]rules.Isolation{{Resource: "a", Threshold: 5}})
	require.NoError(t, err)
	_, ok = fastThreshold(t, g, "a")
	require.False(t, ok)
	_, err = g.LoadIsolationRules(nil)
	require.NoError(t, err)
	_, ok = fastThreshold(t, g, "a")
	require.True(t, ok)
}

// TestReleasedWindowStartsEmpty checks that a rule that does not inherit
// another's state starts counting from zero also when it gets the window a
// dropped rule held (the fast check's window), as it would in a window of
// its own.
func TestReleasedWindowStartsEmpty(t *testing.T) {
	g := New(WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	defer g.Close()
	// A cold warm-up rule admits a third of its threshold, in the
	// resource's window, with the one-second rule's buckets.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 12, Strategy: rules.WarmUp, WarmUpPeriod: time.Minute})
	admitted := 0
	for try(g, "r") {
		admitted++
	}
	require.Equal(t, 4, admitted)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4})
	_, ok := fastThreshold(t, g, "r")
	require.True(t, ok, "the new rule holds the resource's window")
	for i := 0; i < 4; i++ {
		require.True(t, try(g, "r"), "entry %d: nothing of the old rule's counts", i)
	}
	require.False(t, try(g, "r"))
	// The same rule reloaded keeps its counts (it inherits them).
	mustLoadFlow(t, g, rules.Flow{ID: "renamed", Resource: "r", Threshold: 4})
	require.False(t, try(g, "r"))
}

// TestFastCheckDecidesAsTheFullCheck runs one random schedule of entries
// (batches from 1 to above the threshold, clock steps across bucket
// boundaries) through two engines with the same flow rule: one takes the
// fast check, the other has an isolation rule too (far above anything in
// flight), so it runs the flow controller's own check. Every decision and
// every refusal's figures must be the same.
func TestFastCheckDecidesAsTheFullCheck(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rule := rules.Flow{ID: "limit", Resource: "r", Threshold: 7}
			fastClk, fullClk := sluicetest.NewManualClock(int64(time.Hour)), sluicetest.NewManualClock(int64(time.Hour))
			fast, full := New(WithClock(fastClk)), New(WithClock(fullClk))
			defer fast.Close()
			defer full.Close()
			mustLoadFlow(t, fast, rule)
			mustLoadFlow(t, full, rule)
			_, err := full.LoadIsolationRules([]rules.Isolation{{Resource: "r", Threshold: 1 << 30}})
			require.NoError(t, err)
			_, ok := fastThreshold(t, fast, "r")
			require.True(t, ok)
			_, ok = fastThreshold(t, full, "r")
			require.False(t, ok)

			rnd := rand.New(rand.NewSource(seed))
			passed := 0
			for i := 0; i < 3000; i++ {
				step := time.Duration(rnd.Intn(40)) * time.Millisecond
				fastClk.Advance(step)
				fullClk.Advance(step)
				batch := 1 + rnd.Intn(9) // sometimes above the threshold
				pf, ef := fast.Entry("r", WithBatch(batch))
				pu, eu := full.Entry("r", WithBatch(batch))
				require.Equal(t, eu == nil, ef == nil, "entry %d", i)
				if ef == nil {
					passed++
					pf.Exit()
					pu.Exit()
					continue
				}
				var bf, bu *BlockError
				require.True(t, errors.As(ef, &bf))
				require.True(t, errors.As(eu, &bu))
				require.Equal(t, *bu, *bf, "entry %d", i)
				if batch <= int(rule.Threshold) {
					now := fastClk.Nanotime()
					require.Equal(t, time.Duration(int64(100*time.Millisecond)-now%int64(100*time.Millisecond)), bf.RetryAfter,
						"entry %d: retry when the oldest bucket leaves the window", i)
				}
				require.Equal(t, &fast.FlowRules()[0], bf.Rule.(*rules.Flow), "the refusal names the rule")
			}
			require.Greater(t, passed, 100)
			require.Equal(t, full.reg.get("r").node.Snapshot(fullClk.Nanotime()).TotalPass,
				fast.reg.get("r").node.Snapshot(fastClk.Nanotime()).TotalPass)
		})
	}
}

// refuseFirst is a custom check that refuses its first n entries.
type refuseFirst struct {
	mu sync.Mutex
	n  int
}

func (s *refuseFirst) Check(ec *slots.Entry) *core.BlockError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return nil
	}
	s.n--
	return &core.BlockError{Reason: "custom"}
}

// TestFastCheckGivesBackWhatALaterCheckRefused checks that an entry the
// fast check admitted and a later (custom) check refused leaves no trace
// in the flow rule's window.
func TestFastCheckGivesBackWhatALaterCheckRefused(t *testing.T) {
	g := New(WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	defer g.Close()
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 3})
	require.NoError(t, g.RegisterSlot(&refuseFirst{n: 5}, 0))
	_, ok := fastThreshold(t, g, "r")
	require.True(t, ok)
	for i := 0; i < 5; i++ {
		_, err := g.Entry("r", WithBatch(2))
		var be *BlockError
		require.True(t, errors.As(err, &be))
		require.Equal(t, core.BlockCustom, be.Type, "entry %d: refused by the custom check, not by flow", i)
	}
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "r"), "entry %d: the refused batches were given back", i)
	}
	require.False(t, try(g, "r"))
}

// TestFastAndFullChecksShareOneWindowAcrossReloads hammers a resource from
// several goroutines while its rules switch between the fast check and the
// full checks, with the clock standing still: exactly the threshold is
// admitted, because both count in the same window and a reload keeps it.
func TestFastAndFullChecksShareOneWindowAcrossReloads(t *testing.T) {
	const threshold = 200
	g := New(WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	defer g.Close()
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: threshold})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; i < 2000; i++ {
				if p, err := g.Entry("r"); err == nil {
					n++
					p.Exit()
				}
			}
			mu.Lock()
			admitted += n
			mu.Unlock()
		}()
	}
	for i := 0; i < 100; i++ {
		var iso []rules.Isolation
		if i%2 == 0 {
			iso = []rules.Isolation{{Resource: "r", Threshold: 1 << 30}}
		}
		_, err := g.LoadIsolationRules(iso)
		require.NoError(t, err)
	}
	wg.Wait()
	require.Equal(t, threshold, admitted)
}
