package sluice

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCallerTallyBounded: from 8 goroutines, 4,000 callers on 300
// resources in one second: at most 256 resources and 16 callers each are
// kept, Space-Saving keeps each resource's sum of counts equal to its
// refusals, and the heavy caller (a fifth of a resource's refusals) is
// counted at least as often as it was refused.
func TestCallerTallyBounded(t *testing.T) {
	tl := newCallerTally()
	now := int64(5 * time.Second)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				for r := 0; r < 300; r += 37 {
					res := fmt.Sprintf("r%03d", r+g)
					tl.note(res, fmt.Sprintf("c%d-%d", g, i), 1, now)
					if i%4 == 0 {
						tl.note(res, "heavy", 1, now)
					}
				}
			}
		}()
	}
	wg.Wait()
	tl.mu.Lock()
	if len(tl.cur) > maxCallerResources {
		t.Fatalf("%d resources kept", len(tl.cur))
	}
	for res, s := range tl.cur {
		var sum uint64
		for i := 0; i < s.used; i++ {
			sum += s.count[i]
		}
		if s.used > callerSlots || sum != 625 {
			t.Fatalf("%s: %d slots, sum %d, want 625", res, s.used, sum)
		}
	}
	tl.mu.Unlock()
	top := tl.top("r000", 5)
	if len(top) != topCallers || top["heavy"] < 125 {
		t.Fatalf("top of r000: %v", top)
	}
	if tl.top("r000", 4) != nil || tl.top("r000", 6) != nil {
		t.Fatal("other seconds hold counts")
	}
}
