package cluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/sluicetest"
)

// A Store decides requests for permits of shared budgets on its own clock.
// Here the store in memory of sluicetest, which counts as the Redis one:
// a token bucket of 2 a second, asked for 3 with Partial, grants the 2 it
// holds and says when the third could come.
func Example() {
	store, _ := sluicetest.NewStore(sluicetest.NewManualClock(0))
	budget := cluster.Budget{Key: "api", Algorithm: cluster.TokenBucket, Limit: 2, Interval: time.Second}
	reqs := []cluster.Request{{Budget: budget, N: 3, Partial: true}}
	grants := make([]cluster.Grant, len(reqs))
	if err := store.Take(context.Background(), reqs, grants); err != nil {
		panic(err)
	}
	fmt.Println("granted", grants[0].N, "retry after", grants[0].RetryAfter)
	// Output:
	// granted 2 retry after 500ms
}
