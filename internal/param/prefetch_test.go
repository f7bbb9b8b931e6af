package param

import (
	"math/rand"
	"strconv"
	"sync"
	"testing"
)

// TestPrefetchWhileTableChanges runs Prefetch on values that are being
// inserted, evicted and moved (backward-shift deletion, growth) by checks
// on other goroutines: it must never fault or index out of bounds, and
// changes nothing. Its reads are racy by design, so it runs only without
// the race detector (where Prefetch is a no-op).
func TestPrefetchWhileTableChanges(t *testing.T) {
	if !prefetchOn {
		t.Skip("Prefetch is a no-op under the race detector")
	}
	c := newCache(500, modeReject)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(1))
		for i := 0; i < 200000; i++ {
			s, r := c.locate(strconv.Itoa(rng.Intn(5000)))
			s.mu.Lock()
			s.get(&r, 1, 0)
			s.mu.Unlock()
		}
		close(stop)
	}()
	rng := rand.New(rand.NewSource(2))
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		key := strconv.Itoa(rng.Intn(5000))
		_, h, _ := c.hashes(key)
		for i := range c.shards {
			c.shards[i].tab.prefetch(h)
		}
	}
	wg.Wait()
	if n := c.len(); n > 500 {
		t.Fatalf("cache holds %d values, more than its 500", n)
	}
}
