package sluice

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// grantCounter is a fakeStore that counts the permits it grants: what the
// fleet's budget was charged.
type grantCounter struct {
	*fakeStore
	mu      sync.Mutex
	granted int64
}

func (s *grantCounter) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	err := s.fakeStore.Take(ctx, reqs, grants)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range reqs {
		s.granted += grants[i].N
	}
	return err
}

func (s *grantCounter) charged() int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.granted }

// appsEngine returns an engine on a manual clock whose cluster store
// counts its grants.
func appsEngine(t *testing.T) (*Engine, *grantCounter, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := &grantCounter{fakeStore: newFakeStore(clk)}
	g := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", Timeout: time.Hour}))
	t.Cleanup(func() { _ = g.Close() })
	return g, st, clk
}

// callerEntry makes one entry of res by caller ("" for none), with the
// given options, and exits it; it returns the refusal, nil when it passed.
func callerEntry(t *testing.T, g *Engine, res, caller string, opts ...EntryOption) *core.BlockError {
	t.Helper()
	if caller != "" {
		opts = append(opts, WithCaller(caller))
	}
	p, err := g.Entry(res, opts...)
	if err == nil {
		p.Exit()
		return nil
	}
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	return be
}

// TestClusterAppsFlow: a cluster flow rule listing Apps charges its budget
// for the listed callers only; another caller, or none, is refused as by
// an authority rule and charges nothing. A reload changing Apps applies
// at once and keeps the budget's count.
func TestClusterAppsFlow(t *testing.T) {
	g, st, clk := appsEngine(t)
	rule := rules.Flow{ID: "pay-fleet", Resource: "pay", Threshold: 5, Cluster: &rules.Cluster{Strict: true, Apps: []string{"checkout", "billing"}}}
	mustLoadFlow(t, g, rule)
	for i := 0; i < 3; i++ {
		require.Nil(t, callerEntry(t, g, "pay", "checkout"))
	}
	require.Equal(t, int64(3), st.charged())
	for _, caller := range []string{"search", "", "Checkout"} {
		be := callerEntry(t, g, "pay", caller)
		require.NotNil(t, be, "caller %q", caller)
		assert.Equal(t, core.BlockAuthority, be.Type)
		assert.Equal(t, "pay-fleet", be.Rule.ID)
		assert.Equal(t, reasonNotApp, be.Reason)
	}
	require.Equal(t, int64(3), st.charged(), "a refused caller charges nothing")
	require.Nil(t, callerEntry(t, g, "pay", "billing"))
	require.Nil(t, callerEntry(t, g, "pay", "billing"))
	be := callerEntry(t, g, "pay", "billing")
	require.NotNil(t, be)
	assert.Equal(t, core.BlockCluster, be.Type, "the listed callers share one budget")
	require.Equal(t, int64(5), st.charged())

	// Reload: search in, checkout out. The window's count stays: search
	// is refused by the budget, not let in afresh.
	rule.Cluster = &rules.Cluster{Strict: true, Apps: []string{"search", "billing"}}
	changed, err := loadFlow(g, []rules.Flow{rule})
	require.NoError(t, err)
	require.True(t, changed)
	be = callerEntry(t, g, "pay", "checkout")
	require.NotNil(t, be)
	assert.Equal(t, core.BlockAuthority, be.Type)
	be = callerEntry(t, g, "pay", "search")
	require.NotNil(t, be)
	assert.Equal(t, core.BlockCluster, be.Type)
	clk.Advance(time.Second)
	for i := 0; i < 5; i++ {
		require.Nil(t, callerEntry(t, g, "pay", "search"))
	}
	require.Equal(t, int64(10), st.charged())

	// Apps emptied: every caller draws on the budget, one without too.
	rule.Cluster = &rules.Cluster{Strict: true}
	mustLoadFlow(t, g, rule)
	clk.Advance(time.Second)
	require.Nil(t, callerEntry(t, g, "pay", ""))
	require.Nil(t, callerEntry(t, g, "pay", "checkout"))
	require.Equal(t, int64(12), st.charged())
}

// TestClusterAppsShadow: the refusal of a shadow rule's Apps is counted
// and passed over, as its other refusals are.
func TestClusterAppsShadow(t *testing.T) {
	g, _, _ := appsEngine(t)
	mustLoadFlow(t, g, rules.Flow{Resource: "pay", Threshold: 5, Shadow: true, Cluster: &rules.Cluster{Strict: true, Apps: []string{"checkout"}}})
	require.Nil(t, callerEntry(t, g, "pay", "search"))
}

// TestClusterAppsParam: a cluster param rule listing Apps charges each
// value's budget for the listed callers only.
func TestClusterAppsParam(t *testing.T) {
	g, st, _ := appsEngine(t)
	_, err := loadParams(g, []rules.Param{{ID: "posts", Resource: "post", Key: "user", Threshold: 2, Duration: time.Minute,
		Cluster: &rules.Cluster{Apps: []string{"forum"}}}})
	require.NoError(t, err)
	user := WithStringAttachment("user", "u1")
	require.Nil(t, callerEntry(t, g, "post", "forum", user))
	require.Nil(t, callerEntry(t, g, "post", "forum", user))
	require.Equal(t, int64(2), st.charged())
	for _, caller := range []string{"spam-bot", ""} {
		be := callerEntry(t, g, "post", caller, user)
		require.NotNil(t, be)
		assert.Equal(t, core.BlockAuthority, be.Type)
		assert.Equal(t, "posts", be.Rule.ID)
	}
	be := callerEntry(t, g, "post", "forum", user)
	require.NotNil(t, be)
	assert.Equal(t, core.BlockCluster, be.Type)
	require.Equal(t, int64(2), st.charged())
}
