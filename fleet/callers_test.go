package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/fleetlink"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// TestFrameRefusedCallers: a frame carries, per resource, the second's
// refusals of its most refused callers (at most 10), exact with at most
// 16 callers; a flood of distinct callers keeps the heavy one (Space-
// Saving: counts at least the true ones, over by at most the flood's
// smallest kept count); a caller no entry may carry (1 KiB, not UTF-8) is
// refused with ErrBadCaller and counted nowhere; refusals of the next
// second leave the frame of the one before as it was.
func TestFrameRefusedCallers(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Authority: []rules.Authority{
		{Resource: "api", Allow: []string{"good"}},
		{Resource: "flood", Allow: []string{"good"}},
	}}); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(&Member{eng: eng, app: "shop", id: "i1"}, Config{App: "shop", Telemetry: noTelemetry{}})
	enter := func(res, caller string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			e, err := eng.Entry(res, sluice.WithCaller(caller))
			if err == nil {
				e.Exit()
			}
		}
	}

	// Before a publisher asks, nothing is counted.
	clk.Set(int64(100 * time.Millisecond))
	enter("api", "evil", 3)
	fleetlink.CountCallers(eng)
	clk.Set(int64(1100 * time.Millisecond))
	enter("api", "good", 5)
	enter("api", "<script>alert(1)</script>", 7)
	enter("api", "b", 2)
	for _, bad := range []string{strings.Repeat("x", 1024), "\xff\xfe"} {
		if _, err := eng.Entry("api", sluice.WithCaller(bad)); !errors.Is(err, sluice.ErrBadCaller) {
			t.Fatalf("caller of %d bytes: %v, want ErrBadCaller", len(bad), err)
		}
	}
	// The flood: 2,000 distinct callers once each, and "heavy" 300 times
	// among them.
	for i := 0; i < 2000; i++ {
		enter("flood", fmt.Sprintf("c%04d", i), 1)
		if i%10 == 0 {
			enter("flood", "heavy", 3)
		}
	}
	// Second 2 before second 1's frame.
	clk.Set(int64(2100 * time.Millisecond))
	enter("api", "late", 4)

	f, ok := p.frame(clk.Nanotime(), 1)
	if !ok {
		t.Fatal("closed")
	}
	got := map[string]map[string]uint64{}
	for _, r := range f.Resources {
		got[r.Resource] = r.Callers
	}
	want := map[string]uint64{"<script>alert(1)</script>": 7, "b": 2}
	if fmt.Sprint(got["api"]) != fmt.Sprint(want) {
		t.Fatalf("api's callers %v, want %v", got["api"], want)
	}
	fl := got["flood"]
	if len(fl) != 10 {
		t.Fatalf("flood: %d callers, want 10: %v", len(fl), fl)
	}
	// Space-Saving: a kept count is at most the true count plus the
	// smallest count of the 16 slots, which is at most 2,300/16.
	if n := fl["heavy"]; n < 600 || n > 600+2300/16 {
		t.Fatalf("heavy counted %d, want 600..%d: %v", n, 600+2300/16, fl)
	}
	f, _ = p.frame(clk.Nanotime(), 0)
	for _, r := range f.Resources {
		if r.Callers != nil {
			t.Fatalf("second 0, before counting: %v", r.Callers)
		}
	}
	clk.Set(int64(3050 * time.Millisecond))
	f, _ = p.frame(clk.Nanotime(), 2)
	for _, r := range f.Resources {
		if want := map[string]string{"api": "map[late:4]", "flood": "map[]"}[r.Resource]; fmt.Sprint(r.Callers) != want {
			t.Fatalf("second 2, %s: %v, want %s", r.Resource, r.Callers, want)
		}
	}
}
