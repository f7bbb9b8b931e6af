package export_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/export"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// TestExportNamesAreValidAndUnique: names that are not valid UTF-8 are
// passed repaired, after the valid ones, and a repaired name that equals
// one already passed is left out; so are breakers with the same resource
// and rule name. (Rules cannot name an invalid resource or ID: the rule
// validators refuse them.)
func TestExportNamesAreValidAndUnique(t *testing.T) {
	g := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	t.Cleanup(func() { _ = g.Close() })
	for _, r := range []string{"a\xff", "a\uFFFD", "b\xfe", "b\xfd", "ok"} {
		p, err := g.Entry(r)
		require.NoError(t, err)
		p.Exit()
	}
	for _, bad := range []rules.CircuitBreaker{
		{ID: "x\xff", Resource: "ok", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: 1e9, MinRequestAmount: 1, StatInterval: 1e9},
		{Resource: "b\xfe", Strategy: rules.ErrorCount, Threshold: 5, RetryTimeout: 1e9, MinRequestAmount: 1, StatInterval: 1e9},
	} {
		err := g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{bad}})
		require.ErrorContains(t, err, "is not valid UTF-8")
	}
	err := g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{
		{ID: "x", Resource: "ok", Strategy: rules.ErrorCount, Threshold: 5, RetryTimeout: 1e9, MinRequestAmount: 1, StatInterval: 1e9},
		{ID: "x", Resource: "ok", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: 1e9, MinRequestAmount: 1, StatInterval: 1e9},
		{ID: "x\uFFFD", Resource: "ok", Strategy: rules.SlowRequestRatio, MaxAllowedRT: 1e8, Threshold: 0.5, RetryTimeout: 1e9, MinRequestAmount: 1, StatInterval: 1e9},
		{Resource: "a\uFFFD", Strategy: rules.ErrorCount, Threshold: 5, RetryTimeout: 1e9, MinRequestAmount: 1, StatInterval: 1e9},
	}})
	require.NoError(t, err)

	var names []string
	passes := map[string]uint64{}
	var breakers [][2]string
	export.Walk(g, func(name string, s *stat.Snapshot) {
		names = append(names, name)
		passes[name] = s.TotalPass
	}, func(resource, rule string, b *sluice.BreakerStatus) {
		breakers = append(breakers, [2]string{resource, rule})
	})
	assert.ElementsMatch(t, []string{"a\uFFFD", "ok", "b\uFFFD"}, names)
	assert.Equal(t, "b\uFFFD", names[len(names)-1], "a repaired name comes after the valid ones")
	assert.Equal(t, uint64(1), passes["a\uFFFD"], "the valid name wins over the repaired one")
	assert.Equal(t, [][2]string{{"ok", "x"}, {"ok", "x\uFFFD"}, {"a\uFFFD", "3"}}, breakers)

	export.Walk(g, nil, nil) // both optional
}
