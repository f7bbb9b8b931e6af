package sluiceotel_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceotel "github.com/sluice-go/sluice/adapters/otel"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestShadowBlockedPoints: what a rule in shadow mode would have refused
// is reported as sluice.shadow_blocked by block type; sluice.blocked
// counts only real refusals.
func TestShadowBlockedPoints(t *testing.T) {
	g := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer g.Close()
	r, mp := reader(t)
	reg, err := sluiceotel.Register(g, mp)
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /orders", Threshold: 2, Shadow: true}}}))
	for i := 0; i < 5; i++ {
		p, err := g.Entry("GET /orders")
		require.NoError(t, err)
		p.Exit()
	}
	points, _ := collect(t, r)
	assert.Equal(t, 3.0, points["sluice.shadow_blocked[resource=GET /orders type=flow]"], "%v", points)
	assert.Equal(t, 5.0, points["sluice.passed[resource=GET /orders]"])
	for k := range points {
		assert.NotContains(t, k, "sluice.blocked")
	}
}
