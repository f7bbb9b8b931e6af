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

// WithSystemMetrics makes the engine's system rules read load1 and CPU usage
// from src instead of the real process (a window.HostSource: gopsutil, with
// CPU usage relative to the cgroup CPU quota when one applies). Tests pass a
// fake source to drive system rules deterministically.
func WithSystemMetrics(src SystemSource) Option {
	return func(cf *config) { cf.sysSource = src }
}

// WithSystemSampleInterval sets how often the engine samples load1 and CPU
// usage, on the engine's clock. Zero or less means one second.
func WithSystemSampleInterval(d time.Duration) Option {
	return func(cf *config) { cf.sysInterval = d }
}

// WithSystemErrorHandler makes the engine report system metrics sampling
// errors to f instead of slog.Warn. f receives the first error of each run of
// failures of a metric, from the sampler's goroutine; meanwhile the last good
// value stays in use for up to five sample intervals.
func WithSystemErrorHandler(f func(error)) Option {
	return func(cf *config) { cf.sysOnError = f }
}

// System rules protect the whole process and apply to inbound entries only.
// Loading a rule on load1 or CPU usage starts the engine's metrics sampler
// (one goroutine, stopped by Close).

// SystemMetrics returns the last good load1, CPU usage and memory readings
// of the engine's sampler, with their ages. Values are NaN (memory zero, age
// -1) until the sampler, started by loading a load1 or CPU rule, has read
// them.
func (eng *Engine) SystemMetrics() stat.System { return eng.system.Metrics() }
