package sluice

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// userEntry makes one entry of res for user and exits it; it returns the
// refusal, nil when the entry passed.
func userEntry(t *testing.T, g *Engine, res, user string) *core.BlockError {
	t.Helper()
	p, err := g.Entry(res, WithStringAttachment("user", user))
	if err == nil {
		p.Exit()
		return nil
	}
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	return be
}

func TestParamClusterNeedsWithCluster(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	local := rules.Param{Resource: "api", Key: "user", Threshold: 3}
	_, err := loadParams(g, []rules.Param{local})
	require.NoError(t, err)
	shared := rules.Param{Resource: "post", Key: "user", Threshold: 5, Duration: time.Minute, Cluster: &rules.Cluster{}}
	_, err = loadParams(g, []rules.Param{local, shared})
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "param", re.Kind)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Cluster", re.Field)
	assert.Contains(t, err.Error(), "cluster rules need sluice.WithCluster")
	assert.Equal(t, []rules.Param{local}, g.Rules().Param, "the rules in force stay")
	assert.ErrorContains(t, g.LoadRules(rules.Set{Param: []rules.Param{shared}}), "cluster rules need sluice.WithCluster")
}

// TestParamClusterInvalidRefusedWhole: invalid cluster settings refuse the
// whole list, naming rule and field, and the rules in force stay.
func TestParamClusterInvalidRefusedWhole(t *testing.T) {
	g, _, _ := clusterEngine(t, ClusterConfig{})
	good := rules.Param{Resource: "post", Key: "user", Threshold: 5, Cluster: &rules.Cluster{}}
	_, err := loadParams(g, []rules.Param{good})
	require.NoError(t, err)
	for _, bad := range []rules.Param{
		{Resource: "a", Threshold: 5, Metric: rules.Concurrency, Cluster: &rules.Cluster{}},
		{Resource: "a", Threshold: 5, Cluster: &rules.Cluster{Strict: true, Leases: true}},
		{Resource: "a", Threshold: 5, Cluster: &rules.Cluster{Fallback: rules.FallbackBlock, LocalThreshold: 1}},
	} {
		_, err := loadParams(g, []rules.Param{good, bad})
		var re *rules.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 1, re.Index)
		assert.Contains(t, re.Field, "Cluster")
		assert.Equal(t, []rules.Param{good}, g.Rules().Param)
	}
}

// TestParamClusterPerUser: two engines share "5 per minute per user":
// whichever engine serves a user, it gets 5 per minute in all; refusals
// are cluster refusals with the time to retry.
func TestParamClusterPerUser(t *testing.T) {
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	st.mu.Lock()
	st.live = 2
	st.mu.Unlock()
	gs := make([]*Engine, 2)
	for i := range gs {
		gs[i] = New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", Timeout: time.Hour}))
		t.Cleanup(func() { _ = gs[i].Close() })
		_, err := loadParams(gs[i], []rules.Param{{Resource: "post", Key: "user", Threshold: 5, Duration: time.Minute,
			Cluster: &rules.Cluster{}}})

		require.NoError(t, err)
	}
	for minute := 0; minute < 3; minute++ {
		for u := 0; u < 20; u++ {
			user := fmt.Sprint("user-", u)
			admitted := 0
			for i := 0; i < 12; i++ {
				be := userEntry(t, gs[(i+u)%2], "post", user)
				if be == nil {
					admitted++
					continue
				}
				require.Equal(t, core.BlockCluster, be.Type)
				require.Equal(t, "cluster budget exhausted", be.Reason)
				require.Equal(t, 12*time.Second, be.RetryAfter, "one token per 12 s")
			}
			require.Equal(t, 5, admitted, "minute %d, %s", minute, user)
		}
		clk.Advance(time.Minute)
	}
	// Entries without the attachment are not counted.
	for i := 0; i < 10; i++ {
		require.Nil(t, blockOf(t, gs[0], "post"))
	}
}

// TestParamClusterFallback: the store fails; every user is held to its
// local share (5 over 2 instances: 2 per minute) from the first failed
// call on, without touching the store; it comes back after a probe.
func TestParamClusterFallback(t *testing.T) {
	// Two live instances from the first beat, which New starts at once
	// (set later, the count would wait for a beat the manual clock never
	// brings).
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	st.live = 2
	g := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", Timeout: time.Hour, ProbeInterval: time.Second}))
	t.Cleanup(func() { _ = g.Close() })
	_, err := loadParams(g, []rules.Param{{Resource: "post", Key: "user", Threshold: 5, Duration: time.Minute,
		Cluster: &rules.Cluster{}}})

	require.NoError(t, err)
	require.Eventually(t, func() bool { s, _ := g.ClusterStatus(); return s.Live == 2 }, 10*time.Second, time.Millisecond,
		"the heartbeat counts two instances")
	require.Nil(t, userEntry(t, g, "post", "alice"))
	st.setDown(true)
	// The share is 5 / 2 = 2.5 per minute, less what this instance took
	// from the store: alice's one.
	for user, want := range map[string]int{"alice": 1, "bob": 2} {
		admitted := 0
		for i := 0; i < 10; i++ {
			be := userEntry(t, g, "post", user)
			if be == nil {
				admitted++
				continue
			}
			require.Equal(t, core.BlockCluster, be.Type)
			require.Equal(t, "cluster fallback: local share exhausted", be.Reason)
		}
		assert.Equal(t, want, admitted, "%s in fallback", user)
	}
	s, _ := g.ClusterStatus()
	assert.True(t, s.Fallback)
	st.setDown(false)
	clk.Advance(time.Second)
	userEntry(t, g, "post", "carol") // queues the probe
	require.Eventually(t, func() bool { s, _ := g.ClusterStatus(); return !s.Fallback }, 10*time.Second, time.Millisecond)
	admitted := 0
	for i := 0; i < 10; i++ {
		if userEntry(t, g, "post", "dave") == nil {
			admitted++
		}
	}
	assert.Equal(t, 5, admitted, "the store's budget again")
}

// TestParamClusterLeasesGiveBack: a leasing rule's permits go back to the
// store when the rule is removed; an equal reload keeps them.
func TestParamClusterLeasesGiveBack(t *testing.T) {
	g, st, _ := clusterEngine(t, ClusterConfig{Timeout: time.Hour})
	r := rules.Param{Resource: "api", Key: "user", Threshold: 10000, Duration: time.Minute, Cluster: &rules.Cluster{Leases: true}}
	_, err := loadParams(g, []rules.Param{r})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.Nil(t, userEntry(t, g, "api", "alice"))
	}
	changed, err := loadParams(g, []rules.Param{rulewalk.Clone(r)})
	require.NoError(t, err)
	assert.False(t, changed)
	s, _ := g.ClusterStatus()
	assert.Equal(t, int64(0), s.Given, "an equal reload keeps the lease")
	_, err = loadParams(g, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { s, _ := g.ClusterStatus(); return s.Given > 0 }, 10*time.Second, time.Millisecond)
	s, _ = g.ClusterStatus()
	assert.Equal(t, int64(0), s.Dropped)
	st.mu.Lock()
	defer st.mu.Unlock()
	var given int64
	for _, n := range st.given {
		given += n
	}
	assert.Equal(t, s.Given, given)
}
