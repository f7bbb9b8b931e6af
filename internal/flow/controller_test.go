package flow

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

func nodes(map[string]*window.Node) NodeFunc {
	m := map[string]*window.Node{}
	return func(r string) *window.Node {
		if m[r] == nil {
			m[r] = window.NewNode()
		}
		return m[r]
	}
}

func newEntry(now, batch int64) *entry.Context {
	return &entry.Context{Resource: "r", Batch: batch, Start: now}
}

func TestBuildInheritsMatchingStateOnce(t *testing.T) {
	nf := nodes(nil)
	old, err := Build([]rules.Flow{
		{Resource: "r", Threshold: 2},
		{Resource: "r", Threshold: 2, StatInterval: 2 * time.Second},
	}, nil, nf, nil)
	require.NoError(t, err)
	// Fill both windows.
	for i := 0; i < 2; i++ {
		for _, c := range old["r"] {
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), nil))
		}
	}
	tests := []struct {
		name     string
		give     []rules.Flow
		wantPass []bool // first check of each new controller
	}{
		{"same counting, new threshold", []rules.Flow{{Resource: "r", Threshold: 3}}, []bool{true}},
		{"same counting, same threshold", []rules.Flow{{ID: "x", Resource: "r", Threshold: 2}}, []bool{false}},
		{"two rules, only one old state of that kind", []rules.Flow{{Resource: "r", Threshold: 2}, {Resource: "r", Threshold: 2}}, []bool{false, true}},
		{"other interval inherits the other window", []rules.Flow{{Resource: "r", Threshold: 2, StatInterval: 2 * time.Second}}, []bool{false}},
		{"other resource starts fresh", []rules.Flow{{Resource: "s", Threshold: 2}}, []bool{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Build(tt.give, old, nf, nil)
			require.NoError(t, err)
			var cs []*Controller
			for _, r := range tt.give {
				cs = got[r.Resource]
			}
			require.Len(t, cs, len(tt.wantPass))
			for i, c := range cs {
				ec := newEntry(0, 1)
				be := c.Check(context.Background(), ec, nil)
				assert.Equal(t, tt.wantPass[i], be == nil, "controller %d", i)
				if be == nil {
					// Give it back so the shared old window is unchanged
					// for the next case.
					ec.ReleaseTickets(entry.ExitInfo{Start: 0, End: 0, Batch: 1, Blocked: true})
				}
			}
		})
	}
}

func TestBuildValidatesWholeSetFirst(t *testing.T) {
	_, err := Build([]rules.Flow{{Resource: "a", Threshold: 1}, {Resource: "b"}}, nil, nodes(nil), nil)
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Threshold", re.Field)
}

func TestReleaseGivesBackWhenBlockedLater(t *testing.T) {
	tests := []struct {
		name string
		rule rules.Flow
	}{
		{"reject", rules.Flow{Resource: "r", Threshold: 1}},
		{"exact", rules.Flow{Resource: "r", Threshold: 1, Exact: true}},
		{"concurrency", rules.Flow{Resource: "r", Threshold: 1, Metric: rules.Concurrency}},
		{"throttle", rules.Flow{Resource: "r", Threshold: 1, Throttle: &rules.Throttle{}}},
		{"warm-up", rules.Flow{Resource: "r", Threshold: 3, WarmUp: &rules.WarmUp{Period: time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewController(tt.rule, nodes(nil))
			require.NoError(t, err)
			ec := newEntry(0, 1)
			require.Nil(t, c.Check(context.Background(), ec, nil))
			require.Equal(t, 1, ec.Tickets())
			// A later check refused the entry: everything comes back, so an
			// identical entry passes again.
			ec.ReleaseTickets(entry.ExitInfo{Start: 0, End: 0, Batch: 1, Blocked: true})
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), nil))
			assert.NotNil(t, c.Check(context.Background(), newEntry(0, 1), nil), "and the limit still holds")
		})
	}
}

// TestBuildRefusesExactOutsideItsDomain checks Exact's validation: only
// for a QPS reject rule of the direct strategy on its own resource, with a
// whole threshold of at most ruledef.MaxExactThreshold.
func TestBuildRefusesExactOutsideItsDomain(t *testing.T) {
	ok := rules.Flow{Resource: "r", Threshold: 10, Exact: true}
	tests := []struct {
		name      string
		give      func(r *rules.Flow)
		wantField string // "" for valid
	}{
		{"qps reject", func(*rules.Flow) {}, ""},
		{"one minute", func(r *rules.Flow) { r.StatInterval = time.Minute }, ""},
		{"largest threshold", func(r *rules.Flow) { r.Threshold = ruledef.MaxExactThreshold }, ""},
		{"threshold too large", func(r *rules.Flow) { r.Threshold = ruledef.MaxExactThreshold + 1 }, "Threshold"},
		{"fractional threshold", func(r *rules.Flow) { r.Threshold = 2.5 }, "Threshold"},
		{"concurrency", func(r *rules.Flow) { r.Metric = rules.Concurrency }, "Exact"},
		{"throttle", func(r *rules.Flow) { r.Throttle = &rules.Throttle{} }, "Exact"},
		{"warm-up", func(r *rules.Flow) { r.WarmUp = &rules.WarmUp{Period: time.Second} }, "Exact"},
		{"associated", func(r *rules.Flow) { r.RefResource = "s" }, "Exact"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.give(&r)
			_, err := Build([]rules.Flow{r}, nil, nodes(nil), nil)
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *rules.Error
			require.ErrorAs(t, err, &re)
			require.Equal(t, tt.wantField, re.Field, "%v", err)
		})
	}
}

func TestConcurrencyControllerReleasesOnExit(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 2, Metric: rules.Concurrency}, nodes(nil))
	require.NoError(t, err)
	a, b := newEntry(0, 1), newEntry(0, 1)
	require.Nil(t, c.Check(context.Background(), a, nil))
	require.Nil(t, c.Check(context.Background(), b, nil))
	be := c.Check(context.Background(), newEntry(0, 1), nil)
	require.NotNil(t, be)
	assert.Equal(t, float64(2), be.Observed)
	inflight := c.c.(*concurrency).inflight
	assert.Equal(t, int64(2), inflight.Load())
	a.ReleaseTickets(entry.ExitInfo{Batch: 1})
	assert.Equal(t, int64(1), inflight.Load())
	require.Nil(t, c.Check(context.Background(), newEntry(0, 1), nil))
}

func TestWarmUpLimitStartsColdAndIsObservable(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 90, WarmUp: &rules.WarmUp{Period: 10 * time.Second}}, nodes(nil))
	require.NoError(t, err)
	assert.InDelta(t, 30, c.c.(*warmUp).tokens.limitAt(0), 1e-9, "cold: threshold / cold factor")
}

func BenchmarkRejectCheck(b *testing.B) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 1e12}, nodes(nil))
	require.NoError(b, err)
	clk := clock.System()
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			ec := entry.Context{Resource: "r", Batch: 1, Start: clk.Nanotime()}
			if c.Check(context.Background(), &ec, clk) != nil {
				b.Fatal("blocked")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ec := entry.Context{Resource: "r", Batch: 1, Start: clk.Nanotime()}
				if c.Check(context.Background(), &ec, clk) != nil {
					b.Fatal("blocked")
				}
			}
		})
	})
}

// BenchmarkThrottleCheck is the decision of a pacing rule that never has
// to wait (1e12/s, one caller): the schedule's update alone. (Concurrent
// callers read the clock and lock in different orders, and a later
// reading scheduled first makes an earlier one wait: no parallel variant.)
func BenchmarkThrottleCheck(b *testing.B) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 1e12, Throttle: &rules.Throttle{}}, nodes(nil))
	require.NoError(b, err)
	clk := clock.System()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ec := entry.Context{Resource: "r", Batch: 1, Start: clk.Nanotime()}
		if c.Check(context.Background(), &ec, clk) != nil {
			b.Fatal("blocked")
		}
	}
}
