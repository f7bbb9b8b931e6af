package rls

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/rls/config"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// manualClock is a clock the test moves.
type manualClock struct{ ns atomic.Int64 }

func newClock(t time.Time) *manualClock {
	c := &manualClock{}
	c.ns.Store(t.UnixNano())
	return c
}
func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// base is a whole day (and week-aligned second count is not needed): the
// tests start at 00:00:10 UTC of 2026-12-02 unless they say otherwise.
var base = time.Date(2026, 12, 2, 0, 0, 10, 0, time.UTC)

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func mustLoad(t testing.TB, path string) *config.Config {
	t.Helper()
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustParse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type decider interface {
	ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error)
}

func call(t testing.TB, s decider, r *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", r, err)
	}
	return resp
}

// codes returns the overall code and each status's code, remaining and
// limit, for compact comparisons.
func summary(r *pb.RateLimitResponse) string {
	s := r.OverallCode.String()
	for _, st := range r.Statuses {
		lim := "-"
		if st.CurrentLimit != nil {
			lim = fmt.Sprintf("%d/%s", st.CurrentLimit.RequestsPerUnit, config.Unit(st.CurrentLimit.Unit))
		}
		s += fmt.Sprintf(" [%s %s rem=%d]", st.Code, lim, st.LimitRemaining)
	}
	return s
}

// countOK sends n requests and returns how many were answered OK.
func countOK(t testing.TB, s decider, r *pb.RateLimitRequest, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if call(t, s, r).OverallCode == pb.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// The README's examples (testdata/readme.yaml), each behavior the README
// describes replayed in our words.
func TestReadmeExamples(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/readme.yaml"), Options{Now: clk.Now})

	t.Run("1 two values of one key, 500/s each", func(t *testing.T) {
		if got := countOK(t, s, request("mongo_cps", desc("database", "users")), 501); got != 500 {
			t.Fatalf("users: %d OK, want 500", got)
		}
		if got := countOK(t, s, request("mongo_cps", desc("database", "default")), 10); got != 10 {
			t.Fatalf("default shares users' budget: %d OK", got)
		}
		if got := countOK(t, s, request("mongo_cps", desc("database", "other")), 3); got != 3 {
			t.Fatalf("an unlisted value has no limit: %d OK", got)
		}
	})
	t.Run("2 nested and per-value limits", func(t *testing.T) {
		// Marketing to one number: 5 a day, each number its own.
		m1 := request("messaging", desc("message_type", "marketing", "to_number", "2061111111"))
		m2 := request("messaging", desc("message_type", "marketing", "to_number", "2062222222"))
		if a, b := countOK(t, s, m1, 7), countOK(t, s, m2, 7); a != 5 || b != 5 {
			t.Fatalf("marketing per number: %d, %d OK, want 5 each", a, b)
		}
		// Both descriptors in one call: OVER_LIMIT if either is.
		both := request("messaging", desc("message_type", "marketing", "to_number", "2063333333"), desc("to_number", "2063333333"))
		if got := countOK(t, s, both, 6); got != 5 {
			t.Fatalf("two descriptors: %d OK, want 5", got)
		}
		r := call(t, s, both)
		if r.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != pb.RateLimitResponse_OK || r.Statuses[1].LimitRemaining != 100-7 {
			t.Fatalf("statuses: %s", summary(r))
		}
	})
	t.Run("3 key_value before key", func(t *testing.T) {
		if got := countOK(t, s, request("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), 3); got != 0 {
			t.Fatalf("blocked address: %d OK", got)
		}
		if got := countOK(t, s, request("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), 12); got != 10 {
			t.Fatalf("other address: %d OK, want 10", got)
		}
	})
	t.Run("4 depth must match", func(t *testing.T) {
		r := call(t, s, request("example4a", desc("key", "value", "subkey", "subvalue")))
		if r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("a longer request matched a shorter config: %s", summary(r))
		}
		r = call(t, s, request("example4b", desc("key", "value", "subkey", "subvalue")))
		if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 300 || r.Statuses[0].LimitRemaining != 299 {
			t.Fatalf("nested: %s", summary(r))
		}
	})
	t.Run("5 unlimited", func(t *testing.T) {
		r := call(t, s, request("internal", desc("ldap", "x")))
		if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("unlimited: %s", summary(r))
		}
	})
	t.Run("6 shadow mode", func(t *testing.T) {
		a := request("example6", desc("service", "auth-service", "user", "user-a"))
		if got := countOK(t, s, a, 15); got != 15 {
			t.Fatalf("shadow: %d OK, want all 15", got)
		}
		r := call(t, s, a)
		if r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("shadow status: %s", summary(r))
		}
		if got := countOK(t, s, request("example6", desc("service", "auth-service", "user", "user-b")), 25); got != 20 {
			t.Fatalf("user-b: %d OK, want 20", got)
		}
	})
	t.Run("7 replaces", func(t *testing.T) {
		d1 := desc("key_1", "value_1", "user", "bkthomps")
		d2 := desc("key_2", "value_2", "user", "bkthomps")
		// Together: the 5/s limit is replaced, the 10/s one applies.
		if got := countOK(t, s, request("example7", d1, d2), 12); got != 10 {
			t.Fatalf("together: %d OK, want 10", got)
		}
		// The replaced limit was not counted meanwhile: alone it has its 5.
		if got := countOK(t, s, request("example7", d1), 7); got != 5 {
			t.Fatalf("alone: %d OK, want 5", got)
		}
	})
	t.Run("8 detailed metric", func(t *testing.T) {
		if got := countOK(t, s, request("example8", desc("key1", "a")), 11); got != 10 {
			t.Fatalf("key1=a: %d OK, want 10", got)
		}
		if got := countOK(t, s, request("example8", desc("key1", "value1")), 21); got != 20 {
			t.Fatalf("key1=value1: %d OK, want 20", got)
		}
		if st := s.metrics.series("example8.key1_a"); st.total.Load() != 11 || st.over.Load() != 1 {
			t.Fatalf("detailed series: total %d over %d", st.total.Load(), st.over.Load())
		}
	})
	t.Run("9 wildcards", func(t *testing.T) {
		for _, c := range []struct {
			domain, key, value string
			limited            bool
		}{
			{"example9a", "key1", "value1", true}, {"example9a", "key1", "valueXYZ", true}, {"example9a", "key1", "valu", false},
			{"example9b", "path", "/api/123/action", true}, {"example9b", "path", "/api/123/other", false},
			{"example9c", "route", "/api/v1/resource/123/action", true}, {"example9c", "route", "/api/v1/resource/123", false},
		} {
			r := call(t, s, request(c.domain, desc(c.key, c.value)))
			if (r.Statuses[0].CurrentLimit != nil) != c.limited {
				t.Errorf("%s %s=%s: %s, limited want %v", c.domain, c.key, c.value, summary(r), c.limited)
			}
		}
		// Without share_threshold each matching value counts on its own.
		if a, b := countOK(t, s, request("example9a", desc("key1", "valueP")), 21), countOK(t, s, request("example9a", desc("key1", "valueQ")), 21); a != 20 || b != 20 {
			t.Fatalf("per value: %d, %d", a, b)
		}
	})
	t.Run("10 value_to_metric accepted", func(t *testing.T) {
		r := call(t, s, request("example10", desc("route", "api", "http_method", "GET", "subject_id", "123")))
		if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 60 {
			t.Fatalf("%s", summary(r))
		}
	})
	t.Run("11 share_threshold", func(t *testing.T) {
		countOK(t, s, request("example11", desc("files", "files/a.pdf")), 5)
		countOK(t, s, request("example11", desc("files", "files/b.csv")), 5)
		if got := countOK(t, s, request("example11", desc("files", "files/c.txt")), 1); got != 0 {
			t.Fatalf("shared threshold: c.txt admitted")
		}
		countOK(t, s, request("example11", desc("files_no_share", "files_no_share/a.pdf")), 10)
		if got := countOK(t, s, request("example11", desc("files_no_share", "files_no_share/b.csv")), 11); got != 10 {
			t.Fatalf("isolated: %d OK, want 10", got)
		}
	})
}

// Fixed windows aligned to the unit: the count resets at the boundary, not
// a unit after the first hit; duration_until_reset counts down to it.
func TestFixedWindowBoundaries(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: s
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: h
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: w
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 1}
`)
	start := time.Date(2026, 12, 2, 10, 59, 59, 999_000_000, time.UTC)
	clk := newClock(start)
	s := NewService(cfg, Options{Now: clk.Now})
	m := request("d", desc("m", "x"))
	if got := countOK(t, s, m, 3); got != 2 {
		t.Fatalf("minute: %d OK", got)
	}
	if r := call(t, s, m); r.Statuses[0].DurationUntilReset.GetSeconds() != 1 {
		t.Fatalf("until reset at :59: %v", r.Statuses[0].DurationUntilReset)
	}
	clk.Advance(time.Millisecond) // 11:00:00.000: a new minute, a new hour
	r := call(t, s, m)
	if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 || r.Statuses[0].DurationUntilReset.GetSeconds() != 60 {
		t.Fatalf("new minute: %s reset %v", summary(r), r.Statuses[0].DurationUntilReset)
	}
	// Adversarial arrivals: 3 at the last instant of a second, 3 at the
	// first of the next: fixed windows admit all 6 (as envoyproxy/ratelimit).
	clk.ns.Store(time.Date(2026, 12, 2, 11, 0, 5, 999_999_999, time.UTC).UnixNano())
	sr := request("d", desc("s", "x"))
	a := countOK(t, s, sr, 4)
	clk.Advance(time.Nanosecond)
	b := countOK(t, s, sr, 4)
	if a != 3 || b != 3 {
		t.Fatalf("second boundary: %d then %d, want 3 and 3", a, b)
	}
	// Week, month (30 days) and year (365 days) windows are aligned to
	// the Unix epoch, as envoyproxy/ratelimit's UnitToDivider makes them.
	now := clk.Now().Unix()
	for _, c := range []struct {
		key string
		sec int64
	}{{"w", 7 * 86400}, {"mo", 30 * 86400}, {"y", 365 * 86400}, {"h", 3600}} {
		r := call(t, s, request("d", desc(c.key, "x")))
		if want := c.sec - now%c.sec; r.Statuses[0].DurationUntilReset.GetSeconds() != want {
			t.Errorf("%s: reset in %v, want %ds", c.key, r.Statuses[0].DurationUntilReset, want)
		}
	}
}

// envoyproxy/ratelimit's integration test, testBasicBaseConfig
// (test/integration/integration_test.go): in our words, on the configs of
// test/integration/runtime/current/ratelimit/config, with a clock that stays
// inside one hour.
func TestIntegrationBasicSequence(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop-increment=%v", stop), func(t *testing.T) {
			clk := newClock(base)
			s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now, StopIncrementWhenOverLimit: stop})
			replayBasicSequence(t, s)
		})
	}
}

func replayBasicSequence(t *testing.T, s decider) {
	t.Helper()
	stop := false
	if svc, ok := s.(*Service); ok {
		stop = svc.opts.StopIncrementWhenOverLimit
	}
	// An unknown domain: OK, no limit.
	r := call(t, s, request("foo", desc("hello", "world")))
	if r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("unknown domain: %s", summary(r))
	}
	r = call(t, s, request("basic", desc("key1", "foo")))
	if summary(r) != "OK [OK 50/second rem=49]" {
		t.Fatalf("basic key1: %s", summary(r))
	}
	// 25 on a 20/minute key: the 21st and later are over, remaining 0.
	for i := range 25 {
		r := call(t, s, request("another", desc("key2", "v1")))
		want := fmt.Sprintf("OK [OK 20/minute rem=%d]", 20-(i+1))
		if i >= 20 {
			want = "OVER_LIMIT [OVER_LIMIT 20/minute rem=0]"
		}
		if summary(r) != want {
			t.Fatalf("key2 #%d: %s, want %s", i, summary(r), want)
		}
	}
	// Two descriptors, 20/minute and 10/hour, 15 times: from the 11th the
	// second is over; the first keeps counting (envoyproxy/ratelimit's
	// default), or stays at 10 with StopIncrementWhenOverLimit.
	for i := range 15 {
		r := call(t, s, request("another", desc("key2", "v2"), desc("key3", "v2")))
		rem1, rem2, code := 20-(i+1), 10-(i+1), "OK"
		if i >= 10 {
			rem2, code = 0, "OVER_LIMIT"
			if stop {
				rem1 = 10
			}
		}
		want := fmt.Sprintf("%s [OK 20/minute rem=%d] [%s 10/hour rem=%d]", code, rem1, code, rem2)
		if summary(r) != want {
			t.Fatalf("two keys #%d: %s, want %s", i, summary(r), want)
		}
	}
}

// hits_addend: the request's, or a descriptor's own, counts that many hits.
func TestHitsAddend(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now})
	r := request("another", desc("key2", "h"))
	r.HitsAddend = 15
	if got := summary(call(t, s, r)); got != "OK [OK 20/minute rem=5]" {
		t.Fatal(got)
	}
	if got := summary(call(t, s, r)); got != "OVER_LIMIT [OVER_LIMIT 20/minute rem=0]" {
		t.Fatal(got)
	}
	d := desc("key2", "h2")
	d.HitsAddend = wrapperspb.UInt64(0) // a descriptor's 0 reads without counting
	if got := summary(call(t, s, request("another", d))); got != "OK [OK 20/minute rem=20]" {
		t.Fatal(got)
	}
	d.HitsAddend = wrapperspb.UInt64(21)
	if got := summary(call(t, s, request("another", d))); got != "OVER_LIMIT [OVER_LIMIT 20/minute rem=0]" {
		t.Fatal(got)
	}
}

// Huge hits_addend values neither wrap a count around nor break Redis:
// they are capped, and the descriptor is over.
func TestHugeHitsAddend(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now})
	d := desc("key2", "huge")
	d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	for range 3 {
		if got := summary(call(t, s, request("another", d))); got != "OVER_LIMIT [OVER_LIMIT 20/minute rem=0]" {
			t.Fatal(got)
		}
	}
	if satAdd(math.MaxUint64-1, 5) != math.MaxUint64 {
		t.Fatal("satAdd wrapped")
	}
}

// A limit sent by Envoy with the descriptor overrides the config's.
func TestDescriptorLimitOverride(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now})
	d := desc("key1", "o")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	if got := countOK(t, s, request("basic", d), 3); got != 2 {
		t.Fatalf("override: %d OK, want 2", got)
	}
}

// The optional response headers, for the descriptor nearest its limit.
func TestResponseHeaders(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now, ResponseHeaders: true})
	r := call(t, s, request("another", desc("key2", "x"), desc("key3", "x")))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	// key3: 10/hour, 9 left, at 00:00:10 the hour resets in 3590 s.
	if got["RateLimit-Limit"] != "10" || got["RateLimit-Remaining"] != "9" || got["RateLimit-Reset"] != "3590" {
		t.Fatalf("headers: %v", got)
	}
	if r := call(t, s, request("foo", desc("a", "b"))); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers without a limit: %v", r.ResponseHeadersToAdd)
	}
}

// quota_mode: refused only when every quota descriptor is over.
func TestQuotaMode(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustParse(t, `
domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`), Options{Now: clk.Now})
	r := request("q", desc("a", "1"), desc("b", "1"))
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		if got := call(t, s, r).OverallCode.String(); got != want {
			t.Fatalf("#%d: %s, want %s", i, got, want)
		}
	}
}

// Global shadow mode answers OK and counts.
func TestGlobalShadowMode(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now, ShadowMode: true})
	if got := countOK(t, s, request("basic", desc("one_per_minute", "x")), 3); got != 3 {
		t.Fatalf("%d OK", got)
	}
	if s.metrics.globalShadow.Load() != 2 {
		t.Fatalf("global shadow counted %d", s.metrics.globalShadow.Load())
	}
}

// Under concurrency the count is exact: N goroutines, one limit, exactly
// the limit admitted in the window; and a reload between keeps the counts.
func TestConcurrentExactAndReload(t *testing.T) {
	clk := newClock(base)
	cfg := mustLoad(t, "testdata/integration")
	s := NewService(cfg, Options{Now: clk.Now})
	r := request("another", desc("key4", "c")) // 20 per day
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if g == 3 && i == 5 {
					s.SetConfig(mustLoad(t, "testdata/integration"))
				}
				resp, err := s.ShouldRateLimit(context.Background(), r)
				if err == nil && resp.OverallCode == pb.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 20 {
		t.Fatalf("%d admitted, want exactly 20", ok.Load())
	}
}

// Bad requests are answered with an error, never a panic.
func TestBadRequests(t *testing.T) {
	s := NewService(mustLoad(t, "testdata/integration"), Options{})
	for _, r := range []*pb.RateLimitRequest{
		{}, {Domain: "basic"}, {Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "basic", Descriptors: make([]*rlv3.RateLimitDescriptor, MaxRequestDescriptors+1)},
	} {
		if _, err := s.ShouldRateLimit(context.Background(), r); err == nil {
			t.Errorf("%d descriptors, domain %q: no error", len(r.Descriptors), r.Domain)
		}
	}
	// Nil descriptors and entries inside are tolerated.
	if _, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "basic", Descriptors: []*rlv3.RateLimitDescriptor{nil, {Entries: []*rlv3.RateLimitDescriptor_Entry{nil}}}}); err != nil {
		t.Fatal(err)
	}
}

// The local counters keep at most MaxKeys live keys; past that, new keys
// share an overflow counter that can only refuse early.
func TestLocalCountersBounded(t *testing.T) {
	clk := newClock(base)
	s := NewService(mustLoad(t, "testdata/integration"), Options{Now: clk.Now, MaxKeys: localShards * 4})
	for i := range 2000 {
		call(t, s, request("another", desc("key2", fmt.Sprint(i))))
	}
	lc := s.counters.(*localCounters)
	total := 0
	for i := range lc.shards {
		total += len(lc.shards[i].m)
	}
	if total > localShards*4 {
		t.Fatalf("%d keys kept, bound %d", total, localShards*4)
	}
	// A minute later the keys have expired and are swept.
	clk.Advance(time.Minute)
	if r := call(t, s, request("another", desc("key2", "fresh"))); r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("fresh key after sweep: %s", summary(r))
	}
}

// FuzzShouldRateLimit: any request that decodes is answered (a response or
// an error), never a panic, and a response has one status per descriptor.
func FuzzShouldRateLimit(f *testing.F) {
	for _, r := range []*pb.RateLimitRequest{
		request("another", desc("key2", "v"), desc("key3", "w")),
		request("example11", desc("files", "files/a")),
		request("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")),
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	cfg := mustLoad(f, "testdata/readme.yaml")
	clk := newClock(base)
	s := NewService(cfg, Options{Now: clk.Now, ResponseHeaders: true, StopIncrementWhenOverLimit: true, MaxKeys: 4096})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.RateLimitRequest
		if proto.Unmarshal(data, &r) != nil {
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), &r)
		if err == nil && len(resp.Statuses) != len(r.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(r.Descriptors))
		}
	})
}
