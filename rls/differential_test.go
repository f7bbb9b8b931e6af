package rls

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// The differential against envoyproxy/ratelimit itself: its command, built
// from the module proxy in testdata/envoyratelimit (a module of its own,
// outside the workspace: it needs Go 1.25.6), and sluice-rls run against
// one redis-server with the same configs; the same request sequences go to
// both, and every answer must agree (overall code, and each status's code,
// limit and remaining) unless the pair of calls straddled a window's
// boundary. Then the same load goes to each: decisions per second, p50 and
// p99 latency, and Redis CPU per decision.
//
// It builds envoyproxy/ratelimit (minutes), so it runs only with
// SLUICE_RLS_DIFFERENTIAL=1: make rls-differential.
func TestDifferential(t *testing.T) {
	if os.Getenv("SLUICE_RLS_DIFFERENTIAL") == "" {
		t.Skip("the differential against envoyproxy/ratelimit builds it (minutes): make rls-differential")
	}
	bin := buildEnvoyRatelimit(t)
	red := redistest.Start(t)
	runtime := t.TempDir()
	cfgDir := filepath.Join(runtime, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	splitConfigs(t, cfgDir, "testdata/readme.yaml", "testdata/integration/basic.yaml", "testdata/integration/another.yaml")
	if err := os.WriteFile(filepath.Join(cfgDir, "load.yaml"), []byte(loadConfig), 0o600); err != nil {
		t.Fatal(err)
	}

	envoyAddr, envoyPID := startEnvoyRatelimit(t, bin, runtime, red.Addr())
	rlsBin := buildSluiceRLS(t)
	exactAddr, exactPID := startSluiceRLS(t, rlsBin, "-config", cfgDir, "-redis", "redis://"+red.Addr(), "-redis-exact")
	leaseAddr, leasePID := startSluiceRLS(t, rlsBin, "-config", cfgDir, "-redis", "redis://"+red.Addr(), "-redis-prefix", "sluice-rls-lease:", "-expected-instances", "1")
	envoy := pb.NewRateLimitServiceClient(dial(t, envoyAddr))
	sluice := pb.NewRateLimitServiceClient(dial(t, exactAddr))
	leases := pb.NewRateLimitServiceClient(dial(t, leaseAddr))

	run := strconv.FormatInt(time.Now().UnixNano(), 36) // fresh keys for each run
	compared, straddled, leaseDiffers := 0, 0, 0
	for _, seq := range differentialSequences(run) {
		for i, r := range seq.requests {
			t0 := time.Now()
			a, errA := sluice.ShouldRateLimit(context.Background(), r)
			b, errB := envoy.ShouldRateLimit(context.Background(), r)
			c, errC := leases.ShouldRateLimit(context.Background(), r)
			if (errA == nil) != (errB == nil) || (errC == nil) != (errB == nil) {
				t.Fatalf("%s #%d: sluice-rls error %v, with leases %v, envoyproxy/ratelimit error %v", seq.name, i, errA, errC, errB)
			}
			if errA != nil {
				continue
			}
			if t0.Unix()/seq.window != time.Now().Unix()/seq.window {
				straddled++
				break // the counts of this sequence are in two windows now
			}
			if sa, sb := decisions(a), decisions(b); sa != sb {
				t.Errorf("%s #%d %v:\n sluice-rls           %s\n envoyproxy/ratelimit %s", seq.name, i, brief(r), sa, sb)
			}
			if sc, sb := decisions(c), decisions(b); sc != sb {
				leaseDiffers++
				leaseWithinBound(t, seq, i, r, c, b)
			}
			compared++
		}
	}
	t.Logf("%d answers compared, %d sequences cut at a window boundary; with leases %d answers differ (hits refused are not counted)", compared, straddled, leaseDiffers)

	localAddr, localPID := startSluiceRLS(t, rlsBin, "-config", cfgDir)
	t.Logf("%-30s %11s %8s %8s %16s %16s %18s", "service, load", "decisions/s", "p50", "p99", "server CPU/dec.", "decisions/core-s", "Redis CPU/decision")
	for _, l := range []struct {
		name string
		reqs func(run string) []*pb.RateLimitRequest
	}{{"per-user", perUserLoad}, {"one key", oneKeyLoad}} {
		for _, c := range []struct {
			name   string
			client pb.RateLimitServiceClient
			pid    int
		}{
			{"sluice-rls -redis-exact", sluice, exactPID}, {"sluice-rls -redis", leases, leasePID},
			{"envoyproxy/ratelimit", envoy, envoyPID},
			{"sluice-rls (local)", pb.NewRateLimitServiceClient(dial(t, localAddr)), localPID},
		} {
			cpu0 := processCPU(t, c.pid)
			rate, p50, p99, redisPer := load(t, c.client, red, l.reqs(run+c.name))
			serverPer := (processCPU(t, c.pid) - cpu0) / loadTotal
			t.Logf("%-30s %11.0f %8v %8v %14.1fµs %16.0f %16.1fµs", c.name+", "+l.name, rate, p50, p99, serverPer*1e6, 1/serverPer, redisPer)
		}
	}
}

// perUserLoad is per-user descriptors on a 20-a-minute limit, 2,000 users:
// each admitted.
func perUserLoad(run string) []*pb.RateLimitRequest {
	rs := make([]*pb.RateLimitRequest, 2000)
	for i := range rs {
		rs[i] = request("another", desc("key2", run+"-u"+strconv.Itoa(i)))
	}
	return rs
}

// oneKeyLoad is one descriptor on a 5,000-a-second limit (loadConfig),
// shared by every request: near or over the limit each second.
func oneKeyLoad(run string) []*pb.RateLimitRequest {
	return []*pb.RateLimitRequest{request("load", desc("shared", run))}
}

// loadConfig is the limit of oneKeyLoad.
const loadConfig = `domain: load
descriptors:
  - key: shared
    rate_limit: {unit: second, requests_per_unit: 5000}
`

// leaseWithinBound checks an answer with leases that differs from
// envoyproxy/ratelimit's: only where a request's hits were refused, so that
// leases (which count only the hits admitted) may admit later requests
// envoyproxy/ratelimit refuses, never in a sequence of one hit a request.
func leaseWithinBound(t *testing.T, seq sequence, i int, r *pb.RateLimitRequest, lease, envoy *pb.RateLimitResponse) {
	t.Helper()
	if seq.name != "random" {
		t.Errorf("%s #%d %v:\n with leases          %s\n envoyproxy/ratelimit %s", seq.name, i, brief(r), decisions(lease), decisions(envoy))
		return
	}
	if lease.OverallCode == pb.RateLimitResponse_OVER_LIMIT && envoy.OverallCode == pb.RateLimitResponse_OK {
		t.Errorf("random #%d %v: leases refused what envoyproxy/ratelimit admitted:\n with leases          %s\n envoyproxy/ratelimit %s", i, brief(r), decisions(lease), decisions(envoy))
	}
}

type sequence struct {
	name     string
	window   int64 // seconds: the smallest unit the sequence's limits use
	requests []*pb.RateLimitRequest
}

// differentialSequences are the integration test's sequence, each README
// example's, and random mixes of all, with values unique to this run.
func differentialSequences(run string) []sequence {
	v := func(s string) string { return s + "-" + run }
	rep := func(n int, r *pb.RateLimitRequest) []*pb.RateLimitRequest {
		out := make([]*pb.RateLimitRequest, n)
		for i := range out {
			out[i] = r
		}
		return out
	}
	seqs := []sequence{
		{"integration key2", 60, rep(25, request("another", desc("key2", v("a"))))},
		{"integration key2+key3", 60, rep(15, request("another", desc("key2", v("b")), desc("key3", v("b"))))},
		{"example 2 nested", 86400, rep(8, request("messaging", desc("message_type", "marketing", "to_number", v("206")), desc("to_number", v("206"))))},
		{"example 3 blocked", 1, rep(3, request("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")))},
		{"example 5 unlimited", 60, rep(3, request("internal", desc("ldap", v("x")), desc("azure", v("x"))))},
		{"example 6 shadow", 1, rep(12, request("example6", desc("service", "auth-service", "user", "user-a")))},
		{"example 7 replaces", 1, rep(12, request("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")))},
		{"example 8 detailed", 60, rep(12, request("example8", desc("key1", v("d"))))},
		{"example 9 wildcard", 60, rep(22, request("example9a", desc("key1", "value"+v("w"))))},
		{"example 11 share", 3600, append(rep(6, request("example11", desc("files", "files/"+v("a")))), rep(6, request("example11", desc("files", "files/"+v("b"))))...)},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []*rlv3.RateLimitDescriptor{
		desc("key2", v("r1")), desc("key3", v("r1")), desc("key4", v("r2")), desc("one_per_minute", v("r")),
		desc("remote_address", v("r")), desc("to_number", v("r")), desc("key1", v("r")), desc("azure", v("r")), desc("ldap", v("r")),
	}
	domains := []string{"another", "another", "another", "basic", "edge_proxy_per_ip", "messaging", "basic", "internal", "internal"}
	var random []*pb.RateLimitRequest
	for range 200 {
		i := rng.IntN(len(pool))
		d := &rlv3.RateLimitDescriptor{Entries: pool[i].Entries}
		if rng.IntN(4) == 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(rng.IntN(4)))
		}
		r := request(domains[i], d)
		if rng.IntN(3) == 0 && domains[i] == "another" {
			j := rng.IntN(3)
			r.Descriptors = append(r.Descriptors, pool[j])
		}
		random = append(random, r)
	}
	return append(seqs, sequence{"random", 60, random})
}

// decisions is what must agree: codes, limits and remaining counts.
func decisions(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, st := range r.Statuses {
		fmt.Fprintf(&b, " [%s", st.Code)
		if l := st.CurrentLimit; l != nil {
			fmt.Fprintf(&b, " %d/%s %q", l.RequestsPerUnit, l.Unit, l.Name)
		}
		fmt.Fprintf(&b, " rem=%d]", st.LimitRemaining)
	}
	return b.String()
}

func brief(r *pb.RateLimitRequest) string {
	var parts []string
	for _, d := range r.Descriptors {
		var kv []string
		for _, e := range d.Entries {
			kv = append(kv, e.Key+"="+e.Value)
		}
		parts = append(parts, strings.Join(kv, ","))
	}
	return r.Domain + " " + strings.Join(parts, " | ")
}

// splitConfigs writes each YAML document of the files as a file of its
// own (envoyproxy/ratelimit reads one domain a file).
func splitConfigs(t *testing.T, dir string, files ...string) {
	t.Helper()
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			n++
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("c%02d.yaml", n)), []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// buildEnvoyRatelimit builds envoyproxy/ratelimit's command from the
// module testdata/envoyratelimit requires.
func buildEnvoyRatelimit(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/envoyproxy/ratelimit/src/service_cmd")
	cmd.Dir = "testdata/envoyratelimit"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building envoyproxy/ratelimit: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEnvoyRatelimit runs envoyproxy/ratelimit on loopback ports, with
// its documented settings for a file config and one Redis, until the test
// ends; it returns its gRPC address once it answers.
func startEnvoyRatelimit(t *testing.T, bin, runtime, redisAddr string) (string, int) {
	t.Helper()
	grpcPort := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false", "LOG_LEVEL=warn", "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1", "GRPC_HOST=127.0.0.1",
		"PORT="+strconv.Itoa(freePort(t)), "DEBUG_PORT="+strconv.Itoa(freePort(t)), "GRPC_PORT="+strconv.Itoa(grpcPort),
		"RUNTIME_ROOT="+runtime, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "BACKEND_TYPE=redis", "EXPIRATION_JITTER_MAX_SECONDS=0",
	)
	out, err := os.CreateTemp(t.TempDir(), "ratelimit-log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		out.Close()
	})
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	c := pb.NewRateLimitServiceClient(dial(t, addr))
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, request("basic", desc("key1", "ping")))
		cancel()
		if err == nil {
			return addr, cmd.Process.Pid
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(out.Name())
			t.Fatalf("envoyproxy/ratelimit exited:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(out.Name())
			t.Fatalf("envoyproxy/ratelimit not answering after 60 s: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadTotal is the requests of one load.
const loadTotal = 20000

// load sends 20,000 requests of rs from 16 goroutines and returns decisions per second, the
// latency's median and 99th percentile, and Redis's CPU time per decision
// (INFO's used_cpu_sys + used_cpu_user, before and after).
func load(t *testing.T, c pb.RateLimitServiceClient, red *redistest.Server, rs []*pb.RateLimitRequest) (rate float64, p50, p99 time.Duration, cpuPer float64) {
	t.Helper()
	const total, workers = loadTotal, 16
	cpu0 := redisCPU(t, red)
	lat := make([]time.Duration, total)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				t0 := time.Now()
				if _, err := c.ShouldRateLimit(context.Background(), rs[i%len(rs)]); err != nil {
					t.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := redisCPU(t, red) - cpu0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return total / elapsed.Seconds(), lat[total/2].Round(time.Microsecond), lat[total*99/100].Round(time.Microsecond), cpu / total * 1e6
}

func redisCPU(t *testing.T, red *redistest.Server) float64 {
	t.Helper()
	info, err := red.Client(t).Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}
