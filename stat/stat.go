// Package stat holds the read-only views of what an engine measures: a
// resource's figures (Snapshot) and the host metrics behind system rules
// (System). The counting machinery itself is internal; these are copies
// taken at one instant, safe to keep and compare.
package stat

import "time"

// Snapshot is a read-only copy of a node's figures at one instant.
type Snapshot struct {
	// PassQPS, BlockQPS, CompleteQPS and ErrorQPS are per-second counts over
	// the last second.
	PassQPS, BlockQPS, CompleteQPS, ErrorQPS float64
	// AvgRT and MinRT are over the last second; zero when nothing completed.
	AvgRT, MinRT time.Duration
	// Concurrency is the number of requests in flight.
	Concurrency int64
	// MinutePass, MinuteBlock, MinuteComplete and MinuteError are counts over
	// the last minute.
	MinutePass, MinuteBlock, MinuteComplete, MinuteError uint64
	// TotalPass, TotalBlock, TotalComplete and TotalError are counts since
	// the node was made.
	TotalPass, TotalBlock, TotalComplete, TotalError uint64
}

// System is a copy of the last good readings of the host metrics that
// system rules use, and their ages.
type System struct {
	// Load1 is the host's one-minute load average; NaN before the first
	// good reading.
	Load1 float64
	// CPUUsage is the process's CPU usage, a ratio in [0, 1] of what it may
	// use; NaN before the first good reading.
	CPUUsage float64
	// Memory is the process's resident set size in bytes; zero before the
	// first good reading.
	Memory uint64
	// Load1Age, CPUUsageAge and MemoryAge are how long ago (on the
	// engine's clock) each value was read; -1 before the first good
	// reading.
	Load1Age, CPUUsageAge, MemoryAge time.Duration
}
