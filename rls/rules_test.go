package rls

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/sluicetest"
)

// rulesServer runs Run with the rule file path on a manual clock.
func rulesServer(t *testing.T, path string, o ServerOptions) (pb.RateLimitServiceClient, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(1000 * time.Second))
	o.Rules = path
	o.EngineOptions = []sluice.Option{sluice.WithClock(clk)}
	if o.ReloadInterval == 0 {
		o.ReloadInterval = -1
	}
	srv := startServer(t, o)
	return pb.NewRateLimitServiceClient(dial(t, srv.addr)), clk
}

func rcall(t *testing.T, c pb.RateLimitServiceClient, r *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// budget is a status as "CODE limit/unit rem=N reset=D".
func budget(st *pb.RateLimitResponse_DescriptorStatus) string {
	if st.CurrentLimit == nil {
		return st.Code.String()
	}
	return fmt.Sprintf("%s %d/%s rem=%d reset=%v %s", st.Code, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit, st.LimitRemaining, st.DurationUntilReset.AsDuration(), st.CurrentLimit.Name)
}

// expect sends the request and checks the first status against want
// (budget's form).
func expect(t *testing.T, c pb.RateLimitServiceClient, r *pb.RateLimitRequest, want string) {
	t.Helper()
	if got := budget(rcall(t, c, r).Statuses[0]); got != want {
		t.Fatalf("%v: got %q, want %q", r.Descriptors[0].Entries, got, want)
	}
}

// burst sends n requests and returns how many were answered OK.
func burst(t *testing.T, c pb.RateLimitServiceClient, r *pb.RateLimitRequest, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if rcall(t, c, r).OverallCode == pb.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// The manual clock starts at 1000 s, a whole minute's multiple of 500 ms:
// every window below starts there.

func TestRulesSlidingWindow(t *testing.T) {
	c, clk := rulesServer(t, "testdata/rules.yaml", ServerOptions{})
	r := request("edge", desc("path", "/search"))
	expect(t, c, r, "OK 5/SECOND rem=4 reset=1s search")
	if n := burst(t, c, r, 10); n != 4 {
		t.Fatalf("first second: %d more passed, want 4", n)
	}
	clk.Advance(500 * time.Millisecond) // the window's second bucket
	expect(t, c, r, "OVER_LIMIT 5/SECOND rem=0 reset=500ms search")
	clk.Advance(499 * time.Millisecond)
	expect(t, c, r, "OVER_LIMIT 5/SECOND rem=0 reset=1ms search")
	clk.Advance(time.Millisecond) // the first bucket leaves the window: whole again
	expect(t, c, r, "OK 5/SECOND rem=4 reset=1s search")
	// 4 more at 1.999 s, in the bucket from 1.5 s: the window from 1.5 s
	// to 2.5 s holds them, the one at 1 s leaves at 2 s.
	clk.Advance(999 * time.Millisecond)
	if n := burst(t, c, r, 10); n != 4 {
		t.Fatalf("at 1.999 s: %d passed, want 4", n)
	}
	clk.Advance(time.Millisecond)
	expect(t, c, r, "OK 5/SECOND rem=0 reset=1s search")
	expect(t, c, r, "OVER_LIMIT 5/SECOND rem=0 reset=1s search")
}

func TestRulesExactWindow(t *testing.T) {
	c, clk := rulesServer(t, "testdata/rules.yaml", ServerOptions{})
	r := request("edge", desc("path", "/export"))
	expect(t, c, r, "OK 3/MINUTE rem=2 reset=1m0s export")
	clk.Advance(30 * time.Second)
	expect(t, c, r, "OK 3/MINUTE rem=1 reset=1m0s export")
	expect(t, c, r, "OK 3/MINUTE rem=0 reset=1m0s export")
	clk.Advance(30*time.Second - time.Nanosecond)
	// Reset: until the newest (at 30 s) is a minute old, all 3 back.
	expect(t, c, r, "OVER_LIMIT 3/MINUTE rem=0 reset=30.000000001s export")
	clk.Advance(time.Nanosecond) // the first is a minute old: exactly one more
	expect(t, c, r, "OK 3/MINUTE rem=0 reset=1m0s export")
	expect(t, c, r, "OVER_LIMIT 3/MINUTE rem=0 reset=1m0s export")
	clk.Advance(30 * time.Second) // the two at 30 s leave
	if n := burst(t, c, r, 5); n != 2 {
		t.Fatalf("at 90 s: %d passed, want 2", n)
	}
}

func TestRulesTokenBucket(t *testing.T) {
	c, clk := rulesServer(t, "testdata/rules.yaml", ServerOptions{})
	r := request("edge", desc("path", "/feed"))
	expect(t, c, r, "OK 2/SECOND rem=3 reset=500ms feed")
	if n := burst(t, c, r, 10); n != 3 {
		t.Fatalf("the burst: %d more passed, want 3", n)
	}
	clk.Advance(499 * time.Millisecond)
	expect(t, c, r, "OVER_LIMIT 2/SECOND rem=0 reset=1.501s feed")
	clk.Advance(time.Millisecond) // one token
	expect(t, c, r, "OK 2/SECOND rem=0 reset=2s feed")
	clk.Advance(2 * time.Second) // full
	if n := burst(t, c, r, 10); n != 4 {
		t.Fatalf("after 2 s: %d passed, want 4", n)
	}
}

func TestRulesWarmUp(t *testing.T) {
	c, clk := rulesServer(t, "testdata/rules.yaml", ServerOptions{})
	r := request("edge", desc("path", "/cold"))
	// Each second, as many as the resource admits: the allowance rises from
	// 30/3 to 30 as the traffic warms it (the Guava curve, on this clock).
	want := []int{10, 10, 11, 12, 13, 14, 16, 18, 22, 30, 30}
	for s, w := range want {
		ok, last := 0, ""
		for range 40 {
			resp := rcall(t, c, r)
			if resp.OverallCode == pb.RateLimitResponse_OK {
				ok++
			}
			last = budget(resp.Statuses[0])
		}
		if l := fmt.Sprintf("OVER_LIMIT %d/SECOND rem=0 reset=1s cold", w); ok != w || last != l {
			t.Fatalf("second %d: %d passed, last %q; want %d, %q", s, ok, last, w, l)
		}
		clk.Advance(time.Second)
	}
}

func TestRulesPerValue(t *testing.T) {
	c, clk := rulesServer(t, "testdata/rules.yaml", ServerOptions{Service: Options{ResponseHeaders: true}})
	ip := func(a string) *pb.RateLimitRequest {
		return request("edge", desc("remote_address", a), desc("api_key", "k1"))
	}
	if n := burst(t, c, ip("10.0.0.1"), 20); n != 15 {
		t.Fatalf("10.0.0.1: %d passed, want 15 (10 a second + 5)", n)
	}
	// Its own bucket; the key's 100 a minute shared, and counted by every
	// request, also the 5 refused (envoyproxy/ratelimit's default).
	resp := rcall(t, c, ip("10.0.0.2"))
	if got := budget(resp.Statuses[0]) + " | " + budget(resp.Statuses[1]); got != "OK 10/SECOND rem=14 reset=100ms per-ip | OK 100/MINUTE rem=79 reset=12.6s per-key" {
		t.Fatal(got)
	}
	resp = rcall(t, c, ip("10.0.0.1"))
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || budget(resp.Statuses[0]) != "OVER_LIMIT 10/SECOND rem=0 reset=1.5s per-ip" {
		t.Fatal(budget(resp.Statuses[0]))
	}
	var h []string
	for _, kv := range resp.ResponseHeadersToAdd {
		h = append(h, kv.Key+": "+kv.Value)
	}
	if got := strings.Join(h, ", "); got != "RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: 2" {
		t.Fatalf("headers %s", got)
	}
	clk.Advance(100 * time.Millisecond)
	expect(t, c, ip("10.0.0.1"), "OK 10/SECOND rem=0 reset=1.5s per-ip")
	// A value named in a rule's resource is tried before the key alone.
	expect(t, c, request("edge", desc("path", "/nowhere")), "OK")
	expect(t, c, request("other", desc("remote_address", "10.0.0.1")), "OK")
}

func TestRulesReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("flow: [{resource: d/k, threshold: 5}]\n")
	maddr := freeAddr(t)
	c, _ := rulesServer(t, file, ServerOptions{ReloadInterval: 20 * time.Millisecond, Metrics: maddr})
	r := request("d", desc("k", "v"))
	expect(t, c, r, "OK 5/SECOND rem=4 reset=1s d/k")
	write("flow: [{resource: d/k, threshold: 7}, {resource: d/probe, threshold: 1000}]\n")
	probe := request("d", desc("probe", "v"))
	eventually(t, func() bool { return rcall(t, c, probe).Statuses[0].CurrentLimit != nil })
	// The reload keeps the window's count: 7 less the 1 counted.
	expect(t, c, r, "OK 7/SECOND rem=5 reset=1s d/k")
	for i, bad := range []string{
		"flow: [{resource: d/k, thresold: 9}]\n",
		"flow: [{resource: d/k, metric: concurrency, threshold: 9}]\n",
		"circuitBreaker: [{resource: d/k, strategy: error-ratio, threshold: 0.5, retryTimeout: 1s}]\n",
	} {
		write(bad)
		want := fmt.Sprintf("sluice_rls_config_errors_total %d", i+1)
		eventually(t, func() bool { return strings.Contains(scrape(t, maddr), want) })
	}
	expect(t, c, r, "OK 7/SECOND rem=4 reset=1s d/k") // the rules in force stayed
	if m := scrape(t, maddr); !strings.Contains(m, "sluice_rls_config_loads_total 2") {
		t.Errorf("metrics:\n%s", m)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRulesHostileInput(t *testing.T) {
	c, _ := rulesServer(t, "testdata/rules.yaml", ServerOptions{})
	many := make([]*rlv3.RateLimitDescriptor, MaxRequestDescriptors+1)
	for i := range many {
		many[i] = desc("remote_address", "10.0.0.1")
	}
	if _, err := c.ShouldRateLimit(context.Background(), request("edge", many...)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("%d descriptors: %v", len(many), err)
	}
	// 1 MiB values: one param value each (a fingerprint), answered.
	huge := strings.Repeat("x", 1<<20)
	for i := range 3 {
		expect(t, c, request("edge", desc("remote_address", huge+fmt.Sprint(i))), "OK 10/SECOND rem=14 reset=100ms per-ip")
	}
	// Many entries, values with the separator, unknown keys: no rule, OK.
	long := desc()
	for i := range 1000 {
		long.Entries = append(long.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "path", Value: fmt.Sprint("/search/", i)})
	}
	expect(t, c, request("edge", long), "OK")
	expect(t, c, request("edge", desc("path", "/search/x")), "OK")
	expect(t, c, request(strings.Repeat("d", 1<<20), desc("path", "/search")), "OK")
	// hits_addend: 2^32 is a batch over every limit; 0 reads nothing.
	big := request("edge", desc("api_key", "k2"))
	big.HitsAddend = 1 << 31
	if resp := rcall(t, c, big); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || budget(resp.Statuses[0]) != "OVER_LIMIT" {
		t.Fatalf("hits_addend 2^31: %s %s", resp.OverallCode, budget(resp.Statuses[0]))
	}
	zero := desc("api_key", "k2")
	zero.HitsAddend = wrapperspb.UInt64(0)
	expect(t, c, request("edge", zero), "OK")
	expect(t, c, request("edge", desc("api_key", "k2")), "OK 100/MINUTE rem=99 reset=600ms per-key")
}

func TestRulesRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("system: [{metric: concurrency, threshold: 5}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    ServerOptions
		want string
	}{
		{ServerOptions{Rules: "testdata/rules.yaml", Config: "testdata/readme.yaml"}, "exclusive"},
		{ServerOptions{Rules: "testdata/rules.yaml", Redis: "redis://127.0.0.1:1"}, "with -redis every flow and param rule is shared"}, // its warm-up rule
		{ServerOptions{Rules: "testdata/rules.yaml", Redis: "http://127.0.0.1:1"}, "rls: -redis"},
		{ServerOptions{Rules: "redis://127.0.0.1:1/0"}, "the rule store at redis://127.0.0.1:1/0"},
		{ServerOptions{Rules: "mysql://u:secret@127.0.0.1:1/db"}, "rls: -rules"},
		{ServerOptions{Config: "testdata/readme.yaml", Service: Options{CallerKey: "api_key"}}, "-caller-key is provided with -rules only"},
		{ServerOptions{Rules: "testdata/rules.yaml", Service: Options{StopIncrementWhenOverLimit: true}}, "stop-increment"},
		{ServerOptions{Rules: filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{ServerOptions{Rules: bad}, "system rules are not provided"},
	} {
		tc.o.Addr = "127.0.0.1:0"
		if err := Run(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// Concurrent calls on one frozen instant, and the same rules written again
// while they run (a reload, whenever the watcher sees it, keeps the
// bucket): exactly the bucket passes, whatever the interleaving.
func TestRulesConcurrentExact(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	data, err := os.ReadFile("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, clk := rulesServer(t, file, ServerOptions{ReloadInterval: 5 * time.Millisecond})
	r := request("edge", desc("remote_address", "10.0.0.9"))
	const workers, each = 8, 10
	passed := make(chan int, workers)
	start := make(chan struct{})
	for w := range workers {
		go func() {
			<-start
			n := 0
			for range each {
				resp, err := c.ShouldRateLimit(context.Background(), r)
				if err == nil && resp.OverallCode == pb.RateLimitResponse_OK {
					n++
				}
			}
			if w == 0 { // the same rules with a comment: a reload
				_ = os.WriteFile(file, append([]byte("# reloaded\n"), data...), 0o600)
			}
			passed <- n
		}()
	}
	close(start)
	total := 0
	for range workers {
		total += <-passed
	}
	if total != 15 {
		t.Fatalf("%d of %d passed, want 15 (10 a second + 5)", total, workers*each)
	}
	clk.Advance(time.Second)
	if n := burst(t, c, r, 20); n != 10 {
		t.Fatalf("a second later: %d passed, want 10", n)
	}
}

// docs/rls.md shows rls/testdata/rules.yaml (less its first comment line),
// which the tests above run: the two stay one.
func TestRulesDocExample(t *testing.T) {
	data, err := os.ReadFile("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(data), "\n")
	if !strings.Contains(string(doc), "```yaml\n"+body+"```\n") {
		t.Fatal("docs/rls.md does not show rls/testdata/rules.yaml as it is")
	}
}
