package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
)

// failingBuckets is a rule store whose per-resource metadata cannot be
// read (the SQL store's table unreachable while its rules were read).
type failingBuckets struct{ cluster.RuleStore }

func (failingBuckets) Buckets(context.Context, string) ([]dashboard.BucketInfo, error) {
	return nil, errors.New("buckets <unreachable>")
}

// TestBucketsOnlyFromABucketStore: a rule store without per-resource
// metadata shows none (no table; the API answers kept: false); one whose metadata
// fails shows the rules and the failure, escaped, and the API answers 502.
// The SQL stores' metadata: TestServesSQLFleet in cmd/sluice-dashboard.
func TestBucketsOnlyFromABucketStore(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	code, body := ed.get("/apps/shop/rules")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="buckets`)
	code, body = ed.get("/api/apps/shop/buckets")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"kept": false, "buckets": []}`, body)

	f = newFleet(t, func(c *dashboard.Config) { c.Rules = failingBuckets{c.Rules} })
	ed = signIn(t, f.srv, "ed")
	code, body = ed.get("/apps/shop/rules")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="buckets-error">the rule store: buckets &lt;unreachable&gt;`)
	require.Contains(t, body, `id="doc"`, "the rules are shown")
	code, _ = ed.get("/api/apps/shop/buckets")
	require.Equal(t, http.StatusBadGateway, code)
}
