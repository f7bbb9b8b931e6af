package sluiceredis

import (
	"context"
	"math"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// testTimeout bounds every call a test makes to Redis.
const testTimeout = 10 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// standalone starts a server and returns a Store on it and a raw client to
// inspect it.
func standalone(t testing.TB, opts ...Option) (*Store, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return New(srv.Client(t), opts...), srv.Client(t), srv
}

// clock records the Redis time at which the take scripts of a Store
// decided each request of its last Take, for a Store used by one goroutine
// at a time.
type clock struct {
	mu sync.Mutex
	at []int64 // by request index
}

func watch(s *Store) *clock {
	c := &clock{}
	s.onTake = func(now int64, idx []int) {
		c.mu.Lock()
		for _, i := range idx {
			for len(c.at) <= i {
				c.at = append(c.at, 0)
			}
			c.at[i] = now
		}
		c.mu.Unlock()
	}
	return c
}

// now returns the time of the last Take's first request.
func (c *clock) now() int64 { return c.of(0) }

// of returns the time of the last Take's request i.
func (c *clock) of(i int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[i]
}

// redisTime reads Redis's clock in µs.
func redisTime(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

func take1(t testing.TB, s *Store, r cluster.Request) cluster.Grant {
	t.Helper()
	g := make([]cluster.Grant, 1)
	if err := s.Take(ctxT(t), []cluster.Request{r}, g); err != nil {
		t.Fatal(err)
	}
	return g[0]
}

func hfloat(t testing.TB, c redis.UniversalClient, key, field string) float64 {
	t.Helper()
	v, err := c.HGet(ctxT(t), key, field).Result()
	if err != nil {
		t.Fatalf("HGET %s %s: %v", key, field, err)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// us turns a µs figure into a Duration.
func us(x float64) time.Duration { return time.Duration(math.Round(x * 1e3)) }

// near reports whether two durations agree within 1µs (the scripts' figures
// are µs doubles, rounded up to the ns).
func near(a, b time.Duration) bool {
	d := a - b
	return d > -time.Microsecond && d < time.Microsecond
}

// event is a grant as a script made it: Redis time (µs) and permits.
type event struct {
	at int64
	n  int64
}

// maxInWindow returns the most permits granted within any half-open window
// [t, t+ivl): the maximum is reached by a window that starts at a grant.
func maxInWindow(evs []event, ivl int64) (worst int64, at int64) {
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var sum int64
	j := 0
	for i := range evs {
		for j < len(evs) && evs[j].at < evs[i].at+ivl {
			sum += evs[j].n
			j++
		}
		if sum > worst {
			worst, at = sum, evs[i].at
		}
		sum -= evs[i].n
	}
	return worst, at
}
