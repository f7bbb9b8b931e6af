package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// sink is a cluster.Telemetry that records frames in memory; with hang
// set, Publish waits for its context instead.
type sink struct {
	mu     sync.Mutex
	frames []cluster.Frame
	keep   int
	ttl    time.Duration
	hang   bool
	calls  chan struct{}
}

func (s *sink) Publish(ctx context.Context, f cluster.Frame, keep int, ttl time.Duration) error {
	defer func() { s.calls <- struct{}{} }()
	if s.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	s.mu.Lock()
	s.frames = append(s.frames, f)
	s.keep, s.ttl = keep, ttl
	s.mu.Unlock()
	return nil
}

func (s *sink) Frames(context.Context, string, int64) ([]cluster.Frame, error) { return nil, nil }

// TestTelemetryFrames: one frame per second of the engine's clock, of the
// second just ended, with exact figures; refusals are counted per frame.
func TestTelemetryFrames(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s := &sink{calls: make(chan struct{}, 10)}
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Instance: "i1", Telemetry: s, MaxResources: 1, Keep: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 2}}}); err != nil {
		t.Fatal(err)
	}
	enter := func(res string, n int) {
		for i := 0; i < n; i++ {
			if p, err := eng.Entry(res); err == nil {
				p.Exit()
			}
		}
	}
	second := func() cluster.Frame {
		t.Helper()
		blockUntil(t, clk, 1)
		clk.Advance(time.Second)
		<-s.calls
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.frames[len(s.frames)-1]
	}
	enter("api", 5) // 2 pass, 3 refused
	enter("web", 1)
	f := second()
	if f.App != "shop" || f.Instance != "i1" || len(f.Resources) != 1 || s.keep != 60 || s.ttl != time.Minute {
		t.Fatalf("frame %+v (keep %d, ttl %v)", f, s.keep, s.ttl)
	}
	if r := f.Resources[0]; r.Resource != "api" || r.Pass != 2 || r.Block != 3 || r.BlockedBy[1] != 3 || r.Start != 0 {
		t.Fatalf("api: %+v", r)
	}
	enter("api", 3) // 2 pass, 1 refused
	first := f
	f = second()
	if r := f.Resources[0]; r.Pass != 2 || r.Block != 1 || r.BlockedBy[1] != 1 || r.Start != int64(time.Second) {
		t.Fatalf("api, second 1: %+v", r)
	}
	if f.Second != first.Second+1 || len(s.frames) != 2 {
		t.Fatalf("%d frames, seconds %d then %d", len(s.frames), first.Second, f.Second)
	}
	// The sink is told before the publisher counts the frame.
	waitFor(t, "two frames counted", func() bool { return m.Status().Published == 2 })
	if st := m.Status(); st.PublishFailures != 0 {
		t.Fatalf("status %+v", st)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if clk.Waiters() != 0 {
		t.Fatalf("%d timers after Close", clk.Waiters())
	}
}

// TestTelemetryRuleVersion: the frames carry the version in force of the
// rule store the Member follows, one identity for both.
func TestTelemetryRuleVersion(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s := &sink{calls: make(chan struct{}, 10)}
	r := newFileRig(t, "rules.yaml", flowYAML(10))
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Instance: "i1", Rules: fleet.RuleFile(r.path), Telemetry: s, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	blockUntil(t, clk, 2) // the follower's check and the publisher's second
	clk.Advance(time.Second)
	<-s.calls
	s.mu.Lock()
	f := s.frames[0]
	s.mu.Unlock()
	if f.RuleVersion != 1 || f.App != "shop" || f.Instance != "i1" {
		t.Fatalf("frame %+v", f)
	}
}

// TestTelemetryHangingStore: a store that never answers delays no entry,
// each Publish ends at its Timeout and is counted, and Close cuts the last
// one short.
func TestTelemetryHangingStore(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s := &sink{hang: true, calls: make(chan struct{}, 10)}
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Telemetry: s, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	blockUntil(t, clk, 1)
	clk.Advance(time.Second)
	<-s.calls
	waitFor(t, "the failure counted", func() bool { st := m.Status(); return st.PublishFailures == 1 && st.PublishErr != nil })
	for i := 0; i < 100; i++ { // entries go on whatever the store does
		p, err := eng.Entry("api")
		if err != nil {
			t.Fatal(err)
		}
		p.Exit()
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTelemetryAfterEngineClose: a Member whose engine closed first
// publishes nothing more, and Close still stops it.
func TestTelemetryAfterEngineClose(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s := &sink{calls: make(chan struct{}, 10)}
	eng := sluice.New(sluice.WithClock(clk))
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Telemetry: s})
	if err != nil {
		t.Fatal(err)
	}
	blockUntil(t, clk, 1)
	eng.Close()
	clk.Advance(time.Second)
	blockUntil(t, clk, 1) // the publisher went round without publishing
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); st.Published != 0 || len(s.calls) != 0 {
		t.Fatalf("published after the engine's Close: %+v", st)
	}
}

// TestJoinRacesClose: Join, Close and the engine's Close at once leave no
// goroutine running (goleak checks at the end).
func TestJoinRacesClose(t *testing.T) {
	s := &sink{calls: make(chan struct{}, 1000)}
	for i := 0; i < 50; i++ {
		eng := sluice.New()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			m, err := fleet.Join(eng, fleet.Config{App: "shop", Telemetry: s})
			if err == nil {
				m.Close()
			}
		}()
		go func() {
			defer wg.Done()
			eng.Close()
		}()
		wg.Wait()
	}
}
