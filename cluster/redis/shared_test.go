package sluiceredis

import (
	"sync"
	"testing"

	"github.com/sluice-go/sluice/cluster"
)

// sharedResult sums what a concurrent run granted on one budget.
type sharedResult struct {
	total       int64   // permits granted on the budget
	first, last int64   // Redis time (µs) of the first and last decision on it
	events      []event // every grant on it, at the script's time
	asked       int64   // permits asked of it
}

// runShared has workers goroutines, each with its own Store from newStore
// (an instance of the service), Take batch rounds times as fast as they
// can, and sums the grants on budget key. Any error fails the test.
func runShared(t *testing.T, workers, rounds int, newStore func() *Store, batch []cluster.Request, key string) sharedResult {
	t.Helper()
	var (
		mu  sync.Mutex
		res = sharedResult{first: -1}
		wg  sync.WaitGroup
	)
	stores := make([]*Store, workers)
	for w := range stores {
		stores[w] = newStore()
	}
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(s *Store) {
			defer wg.Done()
			clk := watch(s)
			ctx := ctxT(t)
			grants := make([]cluster.Grant, len(batch))
			var mine sharedResult
			mine.first = -1
			for r := 0; r < rounds; r++ {
				if err := s.Take(ctx, batch, grants); err != nil {
					errs <- err
					return
				}
				for i, g := range grants {
					if batch[i].Budget.Key != key {
						continue
					}
					at := clk.of(i)
					if mine.first < 0 || at < mine.first {
						mine.first = at
					}
					if at > mine.last {
						mine.last = at
					}
					mine.asked += batch[i].N
					if g.N > 0 {
						mine.total += g.N
						mine.events = append(mine.events, event{at, g.N})
					}
				}
			}
			mu.Lock()
			res.total += mine.total
			res.asked += mine.asked
			res.events = append(res.events, mine.events...)
			if res.first < 0 || mine.first < res.first {
				res.first = mine.first
			}
			if mine.last > res.last {
				res.last = mine.last
			}
			mu.Unlock()
		}(stores[w])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return res
}
