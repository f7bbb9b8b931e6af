package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
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
	eng := sluice.New(sluice.WithClock(clk), sluice.WithInstanceID("i1"),
		sluice.WithTelemetry(s, sluice.TelemetryConfig{App: "shop", MaxResources: 1, Keep: 60}))
	defer eng.Close()
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
	waitFor(t, "two frames counted", func() bool { st, ok := eng.TelemetryStatus(); return ok && st.Published == 2 })
	if st, _ := eng.TelemetryStatus(); st.Failures != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestTelemetryHangingStore: a store that never answers delays no entry,
// each Publish ends at its Timeout and is counted, and Close cuts the last
// one short.
func TestTelemetryHangingStore(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s := &sink{hang: true, calls: make(chan struct{}, 10)}
	eng := sluice.New(sluice.WithClock(clk),
		sluice.WithTelemetry(s, sluice.TelemetryConfig{App: "shop", Timeout: time.Millisecond}))
	blockUntil(t, clk, 1)
	clk.Advance(time.Second)
	<-s.calls
	waitFor(t, "the failure counted", func() bool { st, _ := eng.TelemetryStatus(); return st.Failures == 1 && st.Err != nil })
	for i := 0; i < 100; i++ { // entries go on whatever the store does
		p, err := eng.Entry("api")
		if err != nil {
			t.Fatal(err)
		}
		p.Exit()
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []sluice.TelemetryConfig{{}, {App: "x", Keep: -1}} {
		e := sluice.New(sluice.WithTelemetry(s, cfg))
		if st, ok := e.TelemetryStatus(); !ok || st.Err == nil {
			t.Fatalf("TelemetryConfig %+v accepted: %+v", cfg, st)
		}
		e.Close()
	}
}

// TestPublishTelemetry: an engine made without WithTelemetry publishes the
// same frames once PublishTelemetry starts; one publisher per engine; stop
// and Close stop it.
func TestPublishTelemetry(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s := &sink{calls: make(chan struct{}, 10)}
	eng := sluice.New(sluice.WithClock(clk), sluice.WithInstanceID("i1"))
	defer eng.Close()
	if _, ok := eng.TelemetryStatus(); ok {
		t.Fatal("telemetry before PublishTelemetry")
	}
	if _, err := eng.PublishTelemetry(s, sluice.TelemetryConfig{}); err == nil || !strings.Contains(err.Error(), "TelemetryConfig.App") {
		t.Fatalf("no App: %v", err)
	}
	if _, err := eng.PublishTelemetry(nil, sluice.TelemetryConfig{App: "shop"}); err == nil {
		t.Fatal("nil Telemetry accepted")
	}
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 2}}}); err != nil {
		t.Fatal(err)
	}
	stop, err := eng.PublishTelemetry(s, sluice.TelemetryConfig{App: "shop", Keep: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.PublishTelemetry(s, sluice.TelemetryConfig{App: "shop"}); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("second publisher: %v", err)
	}
	for i := 0; i < 5; i++ { // 2 pass, 3 refused
		if p, err := eng.Entry("api"); err == nil {
			p.Exit()
		}
	}
	blockUntil(t, clk, 1)
	clk.Advance(time.Second)
	<-s.calls
	s.mu.Lock()
	f := s.frames[0]
	s.mu.Unlock()
	if f.App != "shop" || f.Instance != "i1" || len(f.Resources) != 1 || s.keep != 60 {
		t.Fatalf("frame %+v", f)
	}
	if r := f.Resources[0]; r.Resource != "api" || r.Pass != 2 || r.Block != 3 || r.BlockedBy[1] != 3 {
		t.Fatalf("api: %+v", r)
	}
	// The sink is told before the publisher counts the frame.
	waitFor(t, "the frame counted", func() bool { st, ok := eng.TelemetryStatus(); return ok && st.Published == 1 })
	stop()
	stop() // idempotent
	if _, ok := eng.TelemetryStatus(); ok {
		t.Fatal("telemetry after stop")
	}
	if clk.Waiters() != 0 {
		t.Fatalf("%d timers after stop", clk.Waiters())
	}
	// Another may start, and Close stops it.
	if _, err := eng.PublishTelemetry(s, sluice.TelemetryConfig{App: "shop"}); err != nil {
		t.Fatal(err)
	}
	blockUntil(t, clk, 1)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if clk.Waiters() != 0 {
		t.Fatalf("%d timers after Close", clk.Waiters())
	}
	if _, err := eng.PublishTelemetry(s, sluice.TelemetryConfig{App: "shop"}); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}

	// An engine with WithTelemetry has its publisher.
	e := sluice.New(sluice.WithTelemetry(s, sluice.TelemetryConfig{App: "shop"}))
	defer e.Close()
	if _, err := e.PublishTelemetry(s, sluice.TelemetryConfig{App: "shop"}); err == nil {
		t.Fatal("second publisher beside WithTelemetry")
	}
}

// printer is a cluster.Telemetry that prints each frame's figures.
type printer struct{ done chan struct{} }

func (p printer) Publish(_ context.Context, f cluster.Frame, _ int, _ time.Duration) error {
	for _, r := range f.Resources {
		fmt.Printf("%s %s: passed %d, refused %d\n", f.App, r.Resource, r.Pass, r.Block)
	}
	p.done <- struct{}{}
	return nil
}

func (printer) Frames(context.Context, string, int64) ([]cluster.Frame, error) { return nil, nil }

// An engine made elsewhere (by a library, say) publishes its frames once
// asked; stop (or Close) ends it.
func ExampleEngine_PublishTelemetry() {
	clk := sluicetest.NewManualClock(0) // a real program uses the system clock
	engine := sluice.New(sluice.WithClock(clk))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /api", Threshold: 2}}}); err != nil {
		log.Fatal(err)
	}
	out := printer{done: make(chan struct{}, 1)}
	stop, err := engine.PublishTelemetry(out, sluice.TelemetryConfig{App: "shop"})
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	for i := 0; i < 3; i++ {
		if p, err := engine.Entry("GET /api"); err == nil {
			p.Exit()
		}
	}
	_ = clk.BlockUntil(context.Background(), 1) // the publisher waits for the second's end
	clk.Advance(time.Second)
	<-out.done
	// Output: shop GET /api: passed 2, refused 1
}

// TestPublishTelemetryRacesClose: PublishTelemetry, its stop and Close at
// once leave no publisher running (goleak checks at the end).
func TestPublishTelemetryRacesClose(t *testing.T) {
	s := &sink{calls: make(chan struct{}, 1000)}
	for i := 0; i < 50; i++ {
		eng := sluice.New()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			stop, err := eng.PublishTelemetry(s, sluice.TelemetryConfig{App: "shop"})
			if err != nil && !errors.Is(err, sluice.ErrClosed) {
				t.Error(err)
			}
			if err == nil && i%2 == 0 {
				stop()
			}
		}()
		go func() {
			defer wg.Done()
			eng.Close()
		}()
		wg.Wait()
		eng.Close()
	}
}
