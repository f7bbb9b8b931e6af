package window

import (
	"testing"
	"unsafe"
)

// TestNodeLinesStartOnLines: in a Node that starts on a cache line (as it
// does in a resource, see the sluice package's layout test), what a call
// writes starts on a line of its own: concurrency, the admission window
// (two lines, not three) and each slot of the second-level window (one
// line). BenchmarkManyResources measured the difference.
func TestNodeLinesStartOnLines(t *testing.T) {
	var n Node
	for name, off := range map[string]uintptr{
		"concurrency": unsafe.Offsetof(n.concurrency),
		"admitted":    unsafe.Offsetof(n.admitted),
		"secWords":    unsafe.Offsetof(n.secWords),
	} {
		if off%CacheLine != 0 {
			t.Errorf("%s at offset %d, not on a line start", name, off)
		}
	}
}
