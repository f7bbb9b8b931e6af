package sluiceredis

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// TestTelemetryRefusedCallers: the refused callers of each resource kept
// travel with the frame (hostile names whole), for the resources kept
// only, and a frame without any stores none.
func TestTelemetryRefusedCallers(t *testing.T) {
	srv := redistest.Start(t)
	tm := NewTelemetry(srv.Client(t), TelemetryConfig{MaxResources: 3})
	ctx := ctxT(t)
	f := frame("shop", "a", 100, 5)
	evil := map[string]uint64{"<script>alert(1)</script>": 7, "\"quoted\"\n": 2}
	f.Resources[4].Callers = evil                         // kept: the busiest
	f.Resources[0].Callers = map[string]uint64{"gone": 1} // not kept
	if err := tm.Publish(ctx, f, 4, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := tm.Publish(ctx, frame("shop", "b", 100, 2), 4, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := tm.Frames(ctx, "shop", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d frames", len(got))
	}
	for _, r := range got[0].Resources {
		want := map[string]uint64(nil)
		if r.Resource == "r4" {
			want = evil
		}
		if !reflect.DeepEqual(r.Callers, want) {
			t.Fatalf("%s: callers %v, want %v", r.Resource, r.Callers, want)
		}
	}
	for _, r := range got[1].Resources {
		if r.Callers != nil {
			t.Fatalf("b %s: callers %v", r.Resource, r.Callers)
		}
	}
}
