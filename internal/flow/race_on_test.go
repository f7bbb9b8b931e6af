//go:build race

package flow

// raceEnabled reports whether the race detector is on: its instrumentation
// changes allocation counts, which are checked only without it.
const raceEnabled = true
