package system

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/stat"
)

// DefaultSampleInterval is how often a Sampler reads its source when
// SamplerConfig.Interval is zero.
const DefaultSampleInterval = time.Second

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	// Source is what the sampler reads. Nil means a HostSource with a zero
	// HostConfig, made when the sampler starts.
	Source Source
	// Clock times the samples and stamps each value. Nil means
	// clock.System(). With a *sluicetest.ManualClock the sampler takes a sample
	// each time the clock is moved past the next tick.
	Clock core.Clock
	// Interval is the time between two samples. Zero or less means
	// DefaultSampleInterval.
	Interval time.Duration
	// OnError receives the first error of each run of failed readings of a
	// metric (one call per failure streak, not one per sample), from the
	// sampler's goroutine. Nil means the error is logged with slog.Warn.
	OnError func(error)
	// OnSample, if not nil, is called after each sample with its clock
	// reading, from the sampler's goroutine.
	OnSample func(now int64)
}

// Sampler reads a Source every interval on its own goroutine and keeps
// the last good value of each metric, with the clock reading it was taken
// at, in atomics: readers on the request path pay a few atomic loads and
// never wait for a sample.
//
// A failed reading leaves the metric's last good value (and its time) in
// place. A reading out of range (NaN or negative; for CPU usage above 1 it is
// capped to 1) counts as failed.
//
// The sampler's goroutine is started by Start and stopped by Close; it is
// safe to call every method concurrently.
type Sampler struct {
	clock    core.Clock
	interval time.Duration
	onError  func(error)
	onSample func(now int64)

	load, cpu, mem reading

	mu     sync.Mutex // guards the fields below
	source Source
	stop   chan struct{}
	done   chan struct{}
	closed bool

	failing [3]bool // per metric; touched by the sampling goroutine only
}

// reading is the last good value of one metric and when it was taken.
type reading struct {
	bits atomic.Uint64 // the value's float64 bits; NaN until the first good reading
	at   atomic.Int64  // clock reading of the sample, nanoseconds
	ok   atomic.Bool   // false until the first good reading
}

func (r *reading) store(v float64, at int64) {
	r.at.Store(at)
	r.bits.Store(math.Float64bits(v))
	r.ok.Store(true)
}

// value returns the last good value, or NaN when there is none yet.
func (r *reading) value() float64 { return math.Float64frombits(r.bits.Load()) }

// NewSampler returns a sampler that has not started.
func NewSampler(cfg SamplerConfig) *Sampler {
	s := &Sampler{clock: cfg.Clock, interval: cfg.Interval, onError: cfg.OnError, onSample: cfg.OnSample, source: cfg.Source}
	if s.clock == nil {
		s.clock = clock.System()
	}
	if s.interval <= 0 {
		s.interval = DefaultSampleInterval
	}
	if s.onError == nil {
		s.onError = func(err error) { slog.Warn("sluice: system metrics", "err", err) }
	}
	s.load.bits.Store(math.Float64bits(math.NaN()))
	s.cpu.bits.Store(math.Float64bits(math.NaN()))
	s.mem.bits.Store(math.Float64bits(math.NaN()))
	return s
}

// Interval returns the time between two samples.
func (s *Sampler) Interval() time.Duration { return s.interval }

// Start starts the sampling goroutine, which takes a sample at once and then
// one every interval. It does nothing when the sampler is running or closed.
func (s *Sampler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stop != nil {
		return
	}
	if s.source == nil {
		s.source = NewHostSource(HostConfig{})
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run(s.source, s.stop, s.done)
}

// Running reports whether the sampling goroutine is running.
func (s *Sampler) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop != nil && !s.closed
}

// Close stops the sampling goroutine and waits for it to return. The sampler
// cannot be started again; its last values stay readable. Close is
// idempotent and always returns nil.
func (s *Sampler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return nil
}

func (s *Sampler) run(src Source, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		s.sample(src)
		t := s.clock.NewTimer(s.interval)
		select {
		case <-t.C():
		case <-stop:
			t.Stop()
			return
		}
	}
}

const (
	metricLoad = iota
	metricCPU
	metricMem
)

var metricNames = [3]string{"load1", "cpu usage", "memory"}

// sample reads every metric once. Only the sampling goroutine calls it.
func (s *Sampler) sample(src Source) {
	now := s.clock.Nanotime()
	l, err := src.Load1()
	if err == nil && (math.IsNaN(l) || l < 0) {
		err = fmt.Errorf("reading %v out of range", l)
	}
	s.record(metricLoad, &s.load, l, now, err)

	c, err := src.CPUUsage()
	switch {
	case err != nil:
	case math.IsNaN(c):
		c, err = math.NaN(), nil // no reading yet: keep the last one, no error
	case c < 0:
		err = fmt.Errorf("reading %v out of range", c)
	case c > 1:
		c = 1
	}
	s.record(metricCPU, &s.cpu, c, now, err)

	m, err := src.Memory()
	s.record(metricMem, &s.mem, float64(m), now, err)
	if s.onSample != nil {
		s.onSample(now)
	}
}

func (s *Sampler) record(metric int, r *reading, v float64, now int64, err error) {
	if err != nil {
		if !s.failing[metric] {
			s.failing[metric] = true
			s.onError(fmt.Errorf("stat: sampling %s: %w", metricNames[metric], err))
		}
		return
	}
	s.failing[metric] = false
	if !math.IsNaN(v) {
		r.store(v, now)
	}
}

// Load1 returns the last good load1 reading and the clock reading it was
// taken at, or NaN when there is none yet. It costs two atomic loads.
func (s *Sampler) Load1() (v float64, at int64) { return s.load.value(), s.load.at.Load() }

// CPUUsage returns the last good CPU usage reading (a ratio in [0, 1]) and
// the clock reading it was taken at, or NaN when there is none yet. It costs
// two atomic loads.
func (s *Sampler) CPUUsage() (v float64, at int64) { return s.cpu.value(), s.cpu.at.Load() }

// Snapshot returns the last good values and their ages at the clock's
// current reading.
func (s *Sampler) Snapshot() stat.System {
	now := s.clock.Nanotime()
	age := func(r *reading) time.Duration {
		if !r.ok.Load() {
			return -1
		}
		return time.Duration(now - r.at.Load())
	}
	snap := stat.System{
		Load1:       s.load.value(),
		CPUUsage:    s.cpu.value(),
		Load1Age:    age(&s.load),
		CPUUsageAge: age(&s.cpu),
		MemoryAge:   age(&s.mem),
	}
	if s.mem.ok.Load() {
		snap.Memory = uint64(s.mem.value())
	}
	return snap
}
