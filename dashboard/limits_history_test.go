package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestLiveLimitSteps: the answer for the whole window carries each
// series' rules per version in force over it, from the one in force when
// the window starts (saved before it) to the last; a rule removed leaves
// a step without it. An answer for the last seconds carries none, nor one
// whose window saw no save.
func TestLiveLimitSteps(t *testing.T) {
	const now = 1_800_000_000
	clock := sluicetest.NewManualClock((now - 400) * 1e9)
	rs, _ := sluicetest.NewRuleStore(clock)
	bg := context.Background()
	save := func(base int64, doc string, at int64) {
		t.Helper()
		clock.Set(at * 1e9)
		_, err := rs.Save(bg, "shop", base, cluster.RuleVersion{Doc: []byte(doc), Author: "ed"})
		require.NoError(t, err)
	}
	save(0, "flow:\n  - resource: a\n    threshold: 100\n", now-400)
	f := newFleet(t, func(c *dashboard.Config) {
		c.Rules = rs
		c.Now = func() time.Time { return time.Unix(now, 0) }
	})
	viv := signIn(t, f.srv, "viv")
	type step struct {
		From, Version int64
		Rules         []struct{ Summary string }
	}
	get := func(q string) []step {
		t.Helper()
		code, body := viv.get("/api/apps/shop/live?r=a" + q)
		require.Equal(t, http.StatusOK, code)
		var a struct {
			Resources []struct{ LimitSteps []step }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &a))
		require.Len(t, a.Resources, 1)
		return a.Resources[0].LimitSteps
	}
	require.Nil(t, get(""), "one version over the whole window: the rules in force")

	save(1, "flow:\n  - resource: a\n    threshold: 20\n", now-100)
	save(2, "flow:\n  - resource: b\n    threshold: 5\n", now-30)
	steps := get("")
	require.Len(t, steps, 3)
	require.Equal(t, []int64{now - 300, now - 100, now - 30}, []int64{steps[0].From, steps[1].From, steps[2].From})
	require.Equal(t, []int64{1, 2, 3}, []int64{steps[0].Version, steps[1].Version, steps[2].Version})
	require.Equal(t, "flow 100/s", steps[0].Rules[0].Summary)
	require.Equal(t, "flow 20/s", steps[1].Rules[0].Summary)
	require.Empty(t, steps[2].Rules)
	require.Nil(t, get("&since=1799999998"), "an answer for the last seconds")
}
