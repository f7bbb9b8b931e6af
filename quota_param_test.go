package sluice

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

func enterUser(t testing.TB, g *Engine, user string, n int) *core.BlockError {
	t.Helper()
	p, err := g.Entry("api", WithStringArg(0, user), WithBatch(n))
	if err == nil {
		p.Exit()
		return nil
	}
	var be *core.BlockError
	require.True(t, errors.As(err, &be), "%v", err)
	return be
}

// TestParamQuotaPerUser: each user has 3 a month; one user's refusal at the
// month's last second says 1 s to the reset; the others are untouched; an
// exception gets its own quota; at the 1st everyone starts again.
func TestParamQuotaPerUser(t *testing.T) {
	g, clk := newTestEngine(t, unixAt(t, "2026-01-31T23:59:59Z"))
	mustLoadParam(t, g, rules.Param{Resource: "api", Threshold: 3, Exceptions: map[string]int64{"vip": 5}, Quota: &rules.Quota{Period: "month"}})
	require.Nil(t, enterUser(t, g, "ann", 3))
	be := enterUser(t, g, "ann", 1)
	require.NotNil(t, be)
	require.Equal(t, core.BlockParam, be.Type)
	require.Equal(t, time.Second, be.RetryAfter)
	require.Nil(t, enterUser(t, g, "bob", 1))
	require.Nil(t, enterUser(t, g, "vip", 5))
	require.NotNil(t, enterUser(t, g, "vip", 1))
	clk.Set(unixAt(t, "2026-02-01T00:00:00Z"))
	require.Nil(t, enterUser(t, g, "ann", 3))
	require.Nil(t, enterUser(t, g, "vip", 5))
}

// TestParamQuotaCapacity: a local per-user quota counts at most Capacity
// users a period; a new user past them is refused with a message saying
// so, the counted users go on, and the next period starts empty.
func TestParamQuotaCapacity(t *testing.T) {
	g, clk := newTestEngine(t, unixAt(t, "2026-03-10T10:00:00Z"))
	mustLoadParam(t, g, rules.Param{Resource: "api", Threshold: 2, Capacity: 100, Quota: &rules.Quota{Period: "day"}})
	for i := 0; i < 100; i++ {
		require.Nil(t, enterUser(t, g, "u"+strconv.Itoa(i), 1))
	}
	be := enterUser(t, g, "u100", 1)
	require.NotNil(t, be)
	require.Contains(t, be.Reason, "quota table full")
	require.Contains(t, be.Reason, "raise Capacity")
	require.Equal(t, 14*time.Hour, be.RetryAfter)
	require.Nil(t, enterUser(t, g, "u7", 1), "a counted user goes on")
	clk.Set(unixAt(t, "2026-03-11T00:00:00Z"))
	require.Nil(t, enterUser(t, g, "u100", 1))
}

// TestParamQuotaReload: the same calendar keeps each user's count through
// a reload that changes the threshold; another period starts afresh.
func TestParamQuotaReload(t *testing.T) {
	g, _ := newTestEngine(t, unixAt(t, "2026-03-10T10:00:00Z"))
	r := rules.Param{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "week"}}
	mustLoadParam(t, g, r)
	require.Nil(t, enterUser(t, g, "ann", 2))
	r.Threshold = 3
	mustLoadParam(t, g, r)
	require.Nil(t, enterUser(t, g, "ann", 1))
	require.NotNil(t, enterUser(t, g, "ann", 1))
	r.Quota = &rules.Quota{Period: "month"}
	mustLoadParam(t, g, r)
	require.Nil(t, enterUser(t, g, "ann", 3))
}

// TestParamQuotaGivesBackWhenRefusedLater: a later param rule refusing
// the entry leaves the user's units unspent.
func TestParamQuotaGivesBackWhenRefusedLater(t *testing.T) {
	g, _ := newTestEngine(t, unixAt(t, "2026-03-10T10:00:00Z"))
	mustLoadParam(t, g,
		rules.Param{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "day"}},
		rules.Param{Resource: "api", Index: 1, Threshold: 1, Quota: &rules.Quota{Period: "day"}})
	enter := func(user, team string) error {
		p, err := g.Entry("api", WithArgs(user, team))
		if err == nil {
			p.Exit()
		}
		return err
	}
	require.NoError(t, enter("ann", "red"))
	require.Error(t, enter("ann", "red"), "red's quota is used up")
	require.NoError(t, enter("ann", "blue"), "ann's unit was given back when red's rule refused")
	require.Error(t, enter("ann", "green"), "ann's 2 are used")
}
