//go:build race

package rules

// raceEnabled reports whether the race detector is on: tests that decode
// megabytes skip under it, where they take ten times as long.
const raceEnabled = true
