package sluiceredis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
)

// A client configured for the decision path, and one Take of two shared
// budgets in one round trip.
func Example() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{"127.0.0.1:6379"}, // several for Cluster
		Username:              "shop",                     // ACL user, if any
		Password:              "secret",
		MaxRetries:            -1, // never retry a decision
		MaxRedirects:          -1, // Cluster: nor redirect one
		DialerRetries:         1,
		DialTimeout:           100 * time.Millisecond,
		ReadTimeout:           50 * time.Millisecond,
		WriteTimeout:          50 * time.Millisecond,
		ContextTimeoutEnabled: true, // honour the caller's deadline
		// TLSConfig: &tls.Config{...} for TLS.
	})
	defer rdb.Close()
	store := sluiceredis.New(rdb, sluiceredis.WithPrefix("shop"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	reqs := []cluster.Request{
		{Budget: cluster.Budget{Key: "api:/orders", Algorithm: cluster.TokenBucket, Limit: 5000, Interval: time.Second}, N: 50, Partial: true},
		{Budget: cluster.Budget{Key: "posts:user:42", Algorithm: cluster.SlidingWindow, Limit: 20, Interval: time.Hour}, N: 1},
	}
	grants := make([]cluster.Grant, len(reqs))
	if err := store.Take(ctx, reqs, grants); err != nil {
		fmt.Println("fall back to local limits:", err != nil)
		return
	}
	fmt.Println(grants[0].N, grants[1].N)
}
