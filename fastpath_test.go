package sluice

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
)

// gateOpen reports whether calls on the resource are admitted by its flow
// gate (flow.Gate) rather than by the rule set's checks.
func gateOpen(t *testing.T, g *Engine, name string) bool {
	t.Helper()
	x := g.reg.get(name)
	require.NotNil(t, x, name)
	return x.flow.Open()
}

// admitted counts the entries of batch 1 that resource name admits at the
// clock's current reading, until the first refusal.
func admitted(g *Engine, name string) int {
	n := 0
	for try(g, name) {
		n++
	}
	return n
}

// TestGateOnlyForASingleOneSecondRejectRule checks which rule sets open the
// flow gate: exactly a lone QPS reject rule over the default interval that
// counts in its resource's own window, and it follows reloads both ways.
func TestGateOnlyForASingleOneSecondRejectRule(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := New(WithClock(clk))
	defer g.Close()
	plain := rules.Flow{Resource: "a", Threshold: 10}

	mustLoadFlow(t, g, plain)
	require.True(t, gateOpen(t, g, "a"))
	require.Equal(t, 10, admitted(g, "a"))

	plain.Threshold = 25 // same window, new threshold: 15 more
	mustLoadFlow(t, g, plain)
	require.True(t, gateOpen(t, g, "a"))
	require.Equal(t, 15, admitted(g, "a"))
	clk.Advance(time.Second)

	for _, tc := range []struct {
		name  string
		rules []rules.Flow
	}{
		{"two rules", []rules.Flow{plain, {Resource: "a", Threshold: 100, StatInterval: time.Minute}}},
		{"throttle", []rules.Flow{{Resource: "a", Threshold: 10, Throttle: &rules.Throttle{}}}},
		{"concurrency", []rules.Flow{{Resource: "a", Threshold: 10, Metric: rules.Concurrency}}},
		{"associated", []rules.Flow{{Resource: "a", Threshold: 10, RefResource: "b"}}},
		{"warm-up", []rules.Flow{{Resource: "a", Threshold: 10, WarmUp: &rules.WarmUp{Period: time.Second}}}},
		{"other interval", []rules.Flow{{Resource: "a", Threshold: 10, StatInterval: 2 * time.Second}}},
		{"none", nil},
	} {
		mustLoadFlow(t, g, tc.rules...)
		require.False(t, gateOpen(t, g, "a"), tc.name)
		mustLoadFlow(t, g, plain)
		require.True(t, gateOpen(t, g, "a"), "back to a lone rule after %s", tc.name)
	}

	// Any other kind of rule on the resource turns it off, and removing
	// that rule turns it back on.
	lone := g.Rules().Flow
	_, err := loadFlow(g, append(g.Rules().Flow, rules.Flow{Metric: rules.Concurrency, Resource: "a", Threshold: 5}))
	require.NoError(t, err)
	require.False(t, gateOpen(t, g, "a"))
	_, err = loadFlow(g, lone)
	require.NoError(t, err)
	require.True(t, gateOpen(t, g, "a"))
}

// TestReleasedWindowStartsEmpty checks that a rule that does not inherit
// another's state starts counting from zero also when it gets the window a
// dropped rule held (the gate's window), as it would in a window of its
// own.
func TestReleasedWindowStartsEmpty(t *testing.T) {
	g := New(WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	defer g.Close()
	// A cold warm-up rule admits a third of its threshold, in the
	// resource's window, with the one-second rule's buckets.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 12, WarmUp: &rules.WarmUp{Period: time.Minute}})
	admitted := 0
	for try(g, "r") {
		admitted++
	}
	require.Equal(t, 4, admitted)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4})
	require.True(t, gateOpen(t, g, "r"), "the new rule holds the resource's window")
	for i := 0; i < 4; i++ {
		require.True(t, try(g, "r"), "entry %d: nothing of the old rule's counts", i)
	}
	require.False(t, try(g, "r"))
	// The same rule reloaded keeps its counts (it inherits them).
	mustLoadFlow(t, g, rules.Flow{ID: "renamed", Resource: "r", Threshold: 4})
	require.False(t, try(g, "r"))
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

// TestGateGivesBackWhatALaterCheckRefused checks that an entry the flow
// gate admitted and a later (custom) check refused leaves no trace in the
// flow rule's window.
func TestGateGivesBackWhatALaterCheckRefused(t *testing.T) {
	g := New(WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	defer g.Close()
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 3})
	require.NoError(t, g.RegisterSlot(&refuseFirst{n: 5}, 0))
	require.True(t, gateOpen(t, g, "r"))
	for i := 0; i < 5; i++ {
		_, err := g.Entry("r", WithBatch(2))
		var be *core.BlockError
		require.True(t, errors.As(err, &be))
		require.Equal(t, core.BlockCustom, be.Type, "entry %d: refused by the custom check, not by flow", i)
	}
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "r"), "entry %d: the refused batches were given back", i)
	}
	require.False(t, try(g, "r"))
}

// TestGateAndChecksShareOneWindowAcrossReloads hammers a resource from
// several goroutines while its rules switch between the flow gate and the
// rule set's checks, with the clock standing still: exactly the threshold
// is admitted, because both count in the same window and a reload keeps
// it.
func TestGateAndChecksShareOneWindowAcrossReloads(t *testing.T) {
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
	lone := g.Rules().Flow
	for i := 0; i < 100; i++ {
		iso := lone
		if i%2 == 0 {
			iso = append(slices.Clip(lone), rules.Flow{Metric: rules.Concurrency, Resource: "r", Threshold: 1 << 30})
		}
		_, err := loadFlow(g, iso)
		require.NoError(t, err)
	}
	wg.Wait()
	require.Equal(t, threshold, admitted)
}
