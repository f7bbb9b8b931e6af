package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/stat"
)

type callersAnswer struct {
	Since, Now int64
	Callers    []struct {
		Caller  string
		Refused uint64
		Cut     bool
	}
}

// TestResourceRefusedCallers: a resource's detail adds up its refused
// callers over the table's seconds and its instances, the newest frame of
// an instance included once, and lists the 10 most refused; a hostile
// store's frame with 1,000 callers of a resource is read for its 16
// largest, a 1 KiB name is cut to 256 bytes and marked, names come back
// as JSON with <, > and & escaped. Its viewer reads it; another
// application's user and no one signed in do not.
func TestResourceRefusedCallers(t *testing.T) {
	const now = 1_800_000_000
	f, tel := memFleet(t, now)
	ctx := context.Background()
	long := strings.Repeat("é", 512) // 1 KiB
	pub := func(inst string, sec int64, callers map[string]uint64) {
		t.Helper()
		fr := cluster.Frame{App: "shop", Instance: inst, Second: sec, Resources: []cluster.ResourceSecond{
			{Resource: "GET /api", Second: stat.Second{Block: 1}, Callers: callers},
			{Resource: "other", Second: stat.Second{Block: 1}, Callers: map[string]uint64{"elsewhere": 1000}},
		}}
		require.NoError(t, tel.Publish(ctx, fr, 100, time.Hour))
	}
	pub("a", now-200, map[string]uint64{"before the window": 9999})
	pub("a", now-2, map[string]uint64{"<script>alert(1)</script>": 5, "b": 1})
	pub("a", now-1, map[string]uint64{"<script>alert(1)</script>": 2, long: 3})
	pub("b", now-1, map[string]uint64{"b": 4})
	flood := map[string]uint64{}
	for i := 0; i < 1000; i++ {
		flood[strings.Repeat("x", i%200)+string(rune('A'+i%26))+"-"+url.QueryEscape(string(rune(i)))] = 1
	}
	flood["heavy"] = 50
	pub("c", now-1, flood)

	viv := signIn(t, f.srv, "viv")
	code, body := viv.get("/api/apps/shop/resource?name=" + url.QueryEscape("GET /api"))
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "<")
	require.NotContains(t, body, ">")
	var a callersAnswer
	require.NoError(t, json.Unmarshal([]byte(body), &a))
	require.Len(t, a.Callers, 10)
	require.Equal(t, "heavy", a.Callers[0].Caller)
	require.Equal(t, uint64(50), a.Callers[0].Refused)
	require.Equal(t, "<script>alert(1)</script>", a.Callers[1].Caller)
	require.Equal(t, uint64(7), a.Callers[1].Refused)
	require.Equal(t, "b", a.Callers[2].Caller)
	require.Equal(t, uint64(5), a.Callers[2].Refused)
	require.Equal(t, strings.Repeat("é", 128), a.Callers[3].Caller)
	require.True(t, a.Callers[3].Cut)
	require.Equal(t, uint64(3), a.Callers[3].Refused)
	for _, c := range a.Callers[4:] {
		require.Equal(t, uint64(1), c.Refused, "the flood's others: %q", c.Caller)
	}
	for _, c := range a.Callers {
		require.NotEqual(t, "before the window", c.Caller)
		require.NotEqual(t, "elsewhere", c.Caller)
	}

	// Who may read it.
	bill := signIn(t, f.srv, "bill")
	code, _ = bill.get("/api/apps/shop/resource?name=" + url.QueryEscape("GET /api"))
	require.Equal(t, http.StatusNotFound, code)
	code, body = newClient(t, f.srv).get("/api/apps/shop/resource?name=" + url.QueryEscape("GET /api"))
	require.Equal(t, http.StatusUnauthorized, code)
	require.NotContains(t, body, "heavy")
}
