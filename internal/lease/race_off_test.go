//go:build !race

package lease

// raceEnabled reports whether the race detector is on: it changes inlining,
// so allocation counts are checked only without it.
const raceEnabled = false
