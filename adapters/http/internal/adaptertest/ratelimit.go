package adaptertest

import (
	"fmt"
	"net/http"
	"time"
)

// WindowModel is a reference model of a QPS reject rule over one second
// (ten buckets of 100 ms) for the adapters' RateLimit header tests: it
// decides each request at a clock reading and gives the header fields a
// response must carry, computed on its own.
type WindowModel struct {
	ID     string // the rule's ID, the policy's name ("default" without)
	Limit  int64
	counts map[int64]int64
}

// Decide decides one request at now (ns) and returns whether it passes and
// the RateLimit-Policy, RateLimit and X-RateLimit-* fields its response
// carries.
func (m *WindowModel) Decide(now int64) (ok bool, want http.Header) {
	if m.counts == nil {
		m.counts = map[int64]int64{}
	}
	const width = int64(100 * time.Millisecond)
	e := now / width
	var total int64
	for k := e - 9; k <= e+1; k++ {
		total += m.counts[k]
	}
	ok = total < m.Limit
	if ok {
		m.counts[e]++
		total++
	}
	var reset int64
	for k := e - 9; k <= e+1; k++ {
		if m.counts[k] > 0 {
			reset = (k+10)*width - now
		}
	}
	secs := (reset + int64(time.Second) - 1) / int64(time.Second)
	name := m.ID
	if name == "" {
		name = "default"
	}
	want = http.Header{}
	want.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=1", name, m.Limit))
	want.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", name, m.Limit-total, secs))
	want.Set("X-RateLimit-Limit", fmt.Sprint(m.Limit))
	want.Set("X-RateLimit-Remaining", fmt.Sprint(m.Limit-total))
	want.Set("X-RateLimit-Reset", fmt.Sprint(secs))
	return ok, want
}

// RateLimitHeaders returns the RateLimit header fields of h (those
// WindowModel.Decide gives), for comparison.
func RateLimitHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if v, ok := h[http.CanonicalHeaderKey(k)]; ok {
			out[http.CanonicalHeaderKey(k)] = v
		}
	}
	return out
}
