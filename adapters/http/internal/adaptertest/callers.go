package adaptertest

// The suite's cases of who is calling (WithCaller, authority rules) and of
// the RateLimit fields, on the server side of every adapter.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// RateLimitOf joins the RateLimit-Policy, RateLimit and X-RateLimit-Limit,
// -Remaining and -Reset fields that get reads (RPC: their metadata keys,
// in lower case), by " | ", or "" when there is none.
func RateLimitOf(get func(key string) string) string {
	var vs []string
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		v := get(k)
		if v == "" {
			v = get(strings.ToLower(k))
		}
		vs = append(vs, v)
	}
	if strings.Join(vs, "") == "" {
		return ""
	}
	return strings.Join(vs, " | ")
}

// caseCallers: the caller from a header (RPC: metadata) meets a strict
// authority rule: allowed passes, another, and none, are refused with 403
// (RPC: PermissionDenied), counted as refusals by authority. A caller no entry may carry is
// refused and counts nothing: 1 KiB with 400 (RPC: InvalidArgument); not
// UTF-8, and 1 MiB, whatever the transport answers first (net/http and
// fasthttp refuse a header of 1 MiB, gRPC's client metadata that is not
// printable ASCII), never a pass.
func caseCallers(t *testing.T, a Adapter) {
	g := suiteEngine(t)
	res := a.Resource(RouteX)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: res, Allow: []string{"good"}, Strict: true}}}))
	c := a.Start(t, g, Config{Caller: true})
	require.Equal(t, ok("x"), c.Do(t, Call{Route: RouteX, Caller: "good"}))
	refused := c.Do(t, Call{Route: RouteX, Caller: "evil"})
	require.Equal(t, http.StatusForbidden, refused.Status, "a caller the rule refuses")
	if !a.RPC {
		require.Equal(t, http.StatusText(http.StatusForbidden), refused.Body)
	}
	require.Equal(t, http.StatusForbidden, c.Do(t, Call{Route: RouteX}).Status, "no caller, strict")
	counted := func() [3]uint64 {
		s, _ := g.Snapshot(res)
		return [3]uint64{s.TotalPass, s.TotalBlock, s.BlockedBy[sluice.BlockAuthority]}
	}
	require.Equal(t, [3]uint64{1, 2, 2}, counted(), "pass, block, by authority")
	long := c.Do(t, Call{Route: RouteX, Caller: strings.Repeat("c", 1024)})
	require.Equal(t, http.StatusBadRequest, long.Status, "a caller of 1 KiB")
	for _, bad := range []string{"\xff\xfe", strings.Repeat("m", 1<<20)} {
		got := c.Do(t, Call{Route: RouteX, Caller: bad})
		require.NotEqual(t, http.StatusOK, got.Status, "a caller of %d bytes", len(bad))
	}
	require.Equal(t, [3]uint64{1, 2, 2}, counted(), "bad callers count nothing")
}

// caseRateLimit: the RateLimit fields of a window rule of 3, exact against
// a model: the clock stays at a bucket's start, so each pass takes one of
// the 3 and the window empties a second after; refusals (429, RPC:
// ResourceExhausted) carry the fields too.
func caseRateLimit(t *testing.T, a Adapter) {
	g := suiteEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{ID: "rl", Resource: a.Resource(RouteX), Threshold: 3}}}))
	c := a.Start(t, g, Config{RateLimit: true})
	for i := 0; i < 5; i++ {
		left := max(2-i, 0)
		want := fmt.Sprintf(`"rl";q=3;w=1 | "rl";r=%d;t=1 | 3 | %d | 1`, left, left)
		got := c.Do(t, Call{Route: RouteX})
		if i < 3 {
			require.Equal(t, 200, got.Status, "call %d", i)
		} else {
			require.Equal(t, 429, got.Status, "call %d", i)
		}
		require.Equal(t, want, got.RateLimit, "call %d", i)
	}
}
