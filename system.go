package sluice

import (
	"time"

	"github.com/sluice-go/sluice/stat"
)

// SystemSource reads the process-wide metrics that system rules on load1
// and CPU usage use. The engine's sampler calls it from its own goroutine
// (never on the request path), once per sample interval; an implementation
// used by one engine need not be safe for concurrent use. Tests implement it
// to drive system rules with chosen readings.
type SystemSource interface {
	// Load1 returns the host's one-minute load average.
	Load1() (float64, error)
	// CPUUsage returns the process's CPU usage since the previous call, as a
	// ratio in [0, 1] of the CPU it may use (the cgroup quota when one
	// applies). It may return NaN, and no error, when it has no reading yet.
	CPUUsage() (float64, error)
	// Memory returns the process's resident set size in bytes.
	Memory() (uint64, error)
}

// SystemSampler configures the engine's sampler of load1, CPU usage and
// memory (WithSystemSampler). Its zero value is the default.
type SystemSampler struct {
	// Source is what the sampler reads; nil means the real process
	// (gopsutil, with CPU usage relative to the cgroup CPU quota when one
	// applies). Tests pass a fake source to drive system rules
	// deterministically.
	Source SystemSource
	// Interval is how often the sampler reads, on the engine's clock. Zero
	// or less means one second.
	Interval time.Duration
	// OnError receives sampling errors instead of slog.Warn: the first error
	// of each run of failures of a metric, from the sampler's goroutine;
	// meanwhile the last good value stays in use for up to five intervals.
	OnError func(error)
}

// WithSystemSampler configures the sampler behind system rules on load1 and
// CPU usage (see SystemSampler).
func WithSystemSampler(s SystemSampler) Option {
	return func(cf *config) { cf.sysSource, cf.sysInterval, cf.sysOnError = s.Source, s.Interval, s.OnError }
}

// System rules protect the whole process and apply to inbound entries only.
// Loading a rule on load1 or CPU usage starts the engine's metrics sampler
// (one goroutine, stopped by Close).

// SystemMetrics returns what system rules judge: the last good load1, CPU
// usage and memory readings of the engine's sampler, with their ages, and
// the statistics of inbound traffic at the engine clock's current reading
// (Inbound). Sampled values are NaN (memory zero, age -1) until the
// sampler, started by loading a load1 or CPU rule, has read them.
//
// Inbound counts the inbound entries made while a system rule is in force
// (shadow ones included), and their exits; Inbound.Concurrency counts
// those of them in flight. Without a system rule no call writes anything
// engine-wide, and Inbound holds only what was counted while one was in
// force. Calling SystemMetrics changes nothing of that: an exporter or a
// telemetry publisher that reads load1 and CPU usage at every scrape costs
// the calls nothing. To watch the inbound figures without protecting
// anything, load a system rule in shadow mode (an InboundQPS rule with a
// threshold above any traffic, for instance). Inbound's AvgRT and MinRT
// come from a sample of the exits (see stat.Snapshot.AvgRT) once
// SystemMetrics was called, unless a system rule reads the inbound RT.
func (eng *Engine) SystemMetrics() stat.System {
	if !eng.inboundRead.Load() {
		eng.inboundRead.Store(true) // inbound exits from now on time a sample of their RT
	}
	s := eng.system.Metrics()
	now := eng.clock.Nanotime()
	eng.noticeShedding(now)
	s.Inbound = eng.inboundSnapshot(now)
	return s
}
