package sluiceredis

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/stat"
)

func frame(app, inst string, sec int64, nres int) cluster.Frame {
	f := cluster.Frame{
		App: app, Instance: inst, Second: sec, RuleVersion: 7, ClusterMode: "remote",
		Breakers: []cluster.BreakerFrame{{Resource: "db", State: stat.BreakerOpen}},
		System:   stat.System{Load1: math.NaN(), CPUUsage: 0.25, Memory: 1 << 20, Load1Age: -1, CPUUsageAge: time.Second},
		Shedding: true,
	}
	for i := 0; i < nres; i++ {
		r := cluster.ResourceSecond{Resource: fmt.Sprintf("r%d", i), Concurrency: 3}
		r.Pass, r.Block = uint64(i), 1
		r.AvgRT = 5 * time.Millisecond
		r.BlockedBy[1] = 1
		f.Resources = append(f.Resources, r)
	}
	return f
}

func TestTelemetry(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	tm := NewTelemetry(srv.Client(t), TelemetryConfig{MaxResources: 3})
	ctx := ctxT(t)
	for sec := int64(100); sec < 110; sec++ {
		for _, inst := range []string{"b", "a"} {
			if err := tm.Publish(ctx, frame("shop", inst, sec, 5), 4, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tm.Publish(ctx, frame("blog", "a", 200, 1), 4, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := tm.Frames(ctx, "shop", 0)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, f := range got {
		order = append(order, fmt.Sprintf("%s%d", f.Instance, f.Second))
	}
	if s := strings.Join(order, " "); s != "a106 a107 a108 a109 b106 b107 b108 b109" {
		t.Fatalf("Frames = %s, want the 4 kept of each, by instance then second", s)
	}
	f := got[0]
	if len(f.Resources) != 3 || f.Resources[0].Resource != "r4" || f.Resources[2].Resource != "r2" {
		t.Fatalf("frame resources = %+v, want the 3 busiest", f.Resources)
	}
	want := frame("shop", "a", 106, 5)
	if r := f.Resources[0]; r.Pass != 4 || r.Block != 1 || r.BlockedBy[1] != 1 || r.AvgRT != 5*time.Millisecond || r.Concurrency != 3 {
		t.Fatalf("resource figures = %+v", r)
	}
	if !math.IsNaN(f.System.Load1) || f.System.CPUUsage != 0.25 || f.System.Memory != want.System.Memory ||
		f.System.CPUUsageAge != time.Second || f.System.Load1Age != -1 {
		t.Fatalf("system = %+v, want %+v", f.System, want.System)
	}
	if f.App != "shop" || f.RuleVersion != 7 || f.ClusterMode != "remote" || !f.Shedding || len(f.Breakers) != 1 || f.Breakers[0].State != stat.BreakerOpen {
		t.Fatalf("frame = %+v", f)
	}
	if since, _ := tm.Frames(ctx, "shop", 108); len(since) != 4 || since[0].Second != 108 {
		t.Fatalf("Frames since 108 = %d frames", len(since))
	}

	// Bounded and expiring: every key has a TTL, lists keep their length.
	keys, _ := raw.Keys(ctx, "sluice:tm:*").Result()
	if len(keys) != 9 { // shop idx, a, b (list and newest); blog idx, a (list and newest); the index of applications
		t.Fatalf("keys = %v", keys)
	}
	for _, k := range keys {
		if ttl := raw.PTTL(ctx, k).Val(); ttl <= 50*time.Second || ttl > time.Minute {
			t.Fatalf("PTTL %s = %v, want about 1m", k, ttl)
		}
		if strings.Contains(k, ":f:") {
			if n := raw.LLen(ctx, k).Val(); n > 4 {
				t.Fatalf("LLEN %s = %d, want at most 4", k, n)
			}
		}
	}

	// An instance that stops publishing is forgotten after its ttl.
	if err := tm.Publish(ctx, frame("shop", "c", 110, 1), 4, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for {
		got, err := tm.Frames(ctx, "shop", 110)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance c still listed: %+v", got)
		}
		time.Sleep(time.Millisecond)
	}
	if n := raw.ZCard(ctx, "sluice:tm:{shop}:idx").Val(); n != 2 {
		t.Fatalf("index holds %d instances, want 2", n)
	}

	for _, bad := range []struct {
		f    cluster.Frame
		keep int
		ttl  time.Duration
	}{
		{frame("", "a", 1, 0), 1, time.Second},
		{frame("shop", "", 1, 0), 1, time.Second},
		{frame("shop", "a", 1, 0), 0, time.Second},
		{frame("shop", "a", 1, 0), 1, 0},
	} {
		if err := tm.Publish(ctx, bad.f, bad.keep, bad.ttl); err == nil {
			t.Fatalf("Publish(%q/%q, keep %d, ttl %v) accepted", bad.f.App, bad.f.Instance, bad.keep, bad.ttl)
		}
	}
}

func TestTelemetryCluster(t *testing.T) {
	rc := redistest.StartCluster(t, 3)
	tm := NewTelemetry(rc.Client(t), TelemetryConfig{})
	ctx := ctxT(t)
	for _, app := range []string{"shop", "blog", "x{y}"} {
		for _, inst := range []string{"i1", "i2"} {
			if err := tm.Publish(ctx, frame(app, inst, 5, 2), 10, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		got, err := tm.Frames(ctx, app, 0)
		if err != nil || len(got) != 2 {
			t.Fatalf("Frames(%s) = %d, %v", app, len(got), err)
		}
	}
}

// TestTelemetryHostileNames: resource names come from traffic; any bytes
// round-trip exactly (invalid UTF-8 included), and none reaches a key name.
func TestTelemetryHostileNames(t *testing.T) {
	srv := redistest.Start(t)
	tm := NewTelemetry(srv.Client(t), TelemetryConfig{})
	ctx := ctxT(t)
	names := []string{"a\"}\n{x", "1 2 3", "}{", "\x00\xff", "<script>alert(1)</script>", strings.Repeat("é", 100)}
	f := frame("shop", "i1", 7, 0)
	for _, n := range names {
		f.Resources = append(f.Resources, cluster.ResourceSecond{Resource: n})
	}
	if err := tm.Publish(ctx, f, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := tm.Frames(ctx, "shop", 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("Frames = %d, %v", len(got), err)
	}
	seen := map[string]bool{}
	for _, r := range got[0].Resources {
		seen[r.Resource] = true
	}
	for _, n := range names {
		if !seen[n] {
			t.Fatalf("resource %q did not round-trip: %+v", n, got[0].Resources)
		}
	}
	keys, _ := srv.Client(t).Keys(ctx, "*").Result()
	if len(keys) != 4 {
		t.Fatalf("keys %q, want the indexes of instances and applications, i1's list and its newest frame", keys)
	}
}

// TestParseResourcesMalformed: a frame stored by something else is an
// error, never a panic.
func TestParseResourcesMalformed(t *testing.T) {
	good := string(appendResources(nil, []cluster.ResourceSecond{{Resource: "a"}}))
	for _, give := range []string{
		"a 1 2\n", `"a` + "\n", `"a" 1 2 3` + "\n", `"a"` + strings.Repeat(" x", resourceFields) + "\n",
		good[:len(good)-3], `"a"` + strings.Repeat(" 1", resourceFields-1) + " 1.5\n",
		`"a"` + strings.Repeat(" 1", resourceFields) + " 1\n",
	} {
		if _, err := parseResources(give); err == nil {
			t.Errorf("parseResources(%q) accepted", give)
		}
	}
	if rs, err := parseResources(good); err != nil || len(rs) != 1 || rs[0].Resource != "a" {
		t.Fatalf("parseResources(%q) = %+v, %v", good, rs, err)
	}
}

// TestResourcesCarryAdaptiveTierShadow: a resource's shadow would-be
// refusals, adaptive limit and tier round-trip the compact encoding, and a
// line of an older publisher, without those three figures, still reads
// (as zeros).
func TestResourcesCarryAdaptiveTierShadow(t *testing.T) {
	in := []cluster.ResourceSecond{{Resource: "a", Concurrency: 3, Tier: 2}, {Resource: "b"}}
	in[0].Pass, in[0].ShadowBlock, in[0].AdaptiveLimit = 7, 11, 40
	in[0].BlockedBy[1] = 1
	got, err := parseResources(string(appendResources(nil, in)))
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, in)
	}
	old := `"a" 0 7 0 0 0 0 0 0 3` + strings.Repeat(" 0", len(in[0].BlockedBy)) + "\n"
	got, err = parseResources(old)
	if err != nil || len(got) != 1 || got[0].Pass != 7 || got[0].Concurrency != 3 || got[0].Tier != 0 || got[0].AdaptiveLimit != 0 {
		t.Fatalf("older line = %+v, %v", got, err)
	}
	for _, give := range []string{
		`"a"` + strings.Repeat(" 1", oldResourceFields+1) + "\n",
		`"a"` + strings.Repeat(" 1", oldResourceFields+2) + "\n",
		`"a"` + strings.Repeat(" 1", resourceFields-1) + " x\n",
	} {
		if _, err := parseResources(give); err == nil {
			t.Errorf("parseResources(%q) accepted", give)
		}
	}
}

// TestTelemetrySeriesAndLatest: the list keeps each frame's
// SeriesResources busiest resources, the newest frame of each instance
// is kept whole (MaxResources), and Latest reads it; the stored bytes of
// a kept second follow SeriesResources, not MaxResources.
func TestTelemetrySeriesAndLatest(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	tm := NewTelemetry(srv.Client(t), TelemetryConfig{MaxResources: 1000, SeriesResources: 10})
	ctx := ctxT(t)
	for sec := int64(100); sec < 110; sec++ {
		for _, inst := range []string{"b", "a"} {
			if err := tm.Publish(ctx, frame("shop", inst, sec, 1000), 20, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := tm.Frames(ctx, "shop", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 {
		t.Fatalf("Frames: %d frames, want 20", len(got))
	}
	for _, f := range got {
		if len(f.Resources) != 10 || f.Resources[0].Resource != "r999" {
			t.Fatalf("Frames: %s %d has %d resources (first %q), want the 10 busiest", f.Instance, f.Second, len(f.Resources), f.Resources[0].Resource)
		}
	}
	latest, err := tm.Latest(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(latest) != 2 || latest[0].Instance != "a" || latest[1].Instance != "b" {
		t.Fatalf("Latest: %+v", latest)
	}
	for _, f := range latest {
		if f.Second != 109 || len(f.Resources) != 1000 || f.RuleVersion != 7 || !f.Shedding {
			t.Fatalf("Latest: %s second %d with %d resources, want 109 whole", f.Instance, f.Second, len(f.Resources))
		}
	}
	list, err := raw.MemoryUsage(ctx, "sluice:tm:{shop}:f:a").Result()
	if err != nil {
		t.Fatal(err)
	}
	whole, err := raw.MemoryUsage(ctx, "sluice:tm:{shop}:l:a").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10 seconds of 10 resources: %d bytes; the newest frame of 1,000: %d bytes", list, whole)
	if list > whole/5 {
		t.Fatalf("10 kept seconds take %d bytes, the whole newest frame %d: the list is not trimmed", list, whole)
	}
	// Defaults: SeriesResources follows MaxResources down.
	small := NewTelemetry(srv.Client(t), TelemetryConfig{MaxResources: 3, SeriesResources: 10})
	if small.seriesRes != 3 {
		t.Fatalf("SeriesResources above MaxResources: %d, want 3", small.seriesRes)
	}
}
