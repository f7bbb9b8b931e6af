package window

import "testing"

// TestSnapshotCounts checks that a snapshot reads each bucket's count as
// the window held it, and zero for a bucket whose slot holds another.
func TestSnapshotCounts(t *testing.T) {
	var w Window
	w.TryAdd(100, 3, 100)
	w.TryAdd(105, 2, 100)
	s := w.Snapshot()
	w.TryAdd(105, 1, 100) // after the copy
	for _, tt := range []struct {
		epoch int64
		want  uint64
	}{{100, 3}, {105, 2}, {104, 0}, {100 + windowRing, 0}, {105 - windowRing, 0}} {
		if got := s.Count(tt.epoch); got != tt.want {
			t.Errorf("Count(%d) = %d, want %d", tt.epoch, got, tt.want)
		}
	}
}
