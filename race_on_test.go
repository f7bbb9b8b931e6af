//go:build race

package sluice

// raceEnabled reports whether the race detector is on: its instrumentation
// changes the compiler's inlining decisions, so allocation counts that rely
// on inlining are checked only without it (make test runs both).
const raceEnabled = true
