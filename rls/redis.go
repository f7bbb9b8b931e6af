package rls

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
)

// RedisOptions configures counters shared by the replicas through Redis.
type RedisOptions struct {
	// Prefix starts every key the service writes; empty means "sluice-rls:".
	Prefix string
	// Timeout bounds each request's wait for Redis; a request Redis has not
	// answered in time is decided by the local fallback. Zero means 250 ms
	// (sluice's cluster default).
	Timeout time.Duration
	// ProbeInterval is the least time between two tries of a failing Redis;
	// meanwhile every decision is local. Zero means one second.
	ProbeInterval time.Duration
	// ExpectedInstances is the replica count the fallback divides limits
	// by until a heartbeat has counted the replicas. Zero means 10, as in
	// sluice's ClusterConfig.
	ExpectedInstances int
	// App and Instance name this replica in the heartbeats that count the
	// replicas; empty App means "sluice-rls", empty Instance a random one.
	App, Instance string
	// Exact counts every hit in Redis (INCRBY and EXPIRE), as
	// envoyproxy/ratelimit does, for the same answers; otherwise each
	// replica decides from leases of each window's budget (docs/rls.md,
	// "Leases").
	Exact bool
	// LeasePeriod is the time a lease is sized to last, and after which an
	// unused one is given back; zero means one second.
	LeasePeriod time.Duration
}

// redisCounters counts each fixed window in Redis, one INCRBY and EXPIRE
// per descriptor, the requests that arrive together pipelined in one round
// trip (envoyproxy/ratelimit's scheme, so
// the fleet's counts are exact while Redis answers). When Redis fails or is
// late, the request is decided by sluice's local fallback: each replica
// counts on its own and admits its share of the limit, the limit divided by
// the replicas its heartbeats counted (sluice's cluster/redis Store keeps the
// live set), so that the fleet admits about one limit per window while Redis
// is away (each replica's fallback counters start from its share of the
// fleet's counts, see seed).
type redisCounters struct {
	client    redis.UniversalClient
	opts      RedisOptions
	local     *localCounters
	metrics   *metrics
	failing   atomic.Bool
	nextProbe atomic.Int64 // UnixNano
	instances atomic.Int64

	queue chan *pending // requests waiting for the flushers

	store  *sluiceredis.Store
	member cluster.Member
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newRedisCounters(client redis.UniversalClient, o RedisOptions, m *metrics, maxKeys int) *redisCounters {
	if o.Prefix == "" {
		o.Prefix = "sluice-rls:"
	}
	if o.Timeout <= 0 {
		o.Timeout = 250 * time.Millisecond
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = time.Second
	}
	if o.ExpectedInstances <= 0 {
		o.ExpectedInstances = 10
	}
	if o.App == "" {
		o.App = "sluice-rls"
	}
	if o.Instance == "" {
		o.Instance = randomID()
	}
	r := &redisCounters{
		client: client, opts: o, local: newLocalCounters(maxKeys), metrics: m,
		store:  sluiceredis.New(client, sluiceredis.WithPrefix(o.Prefix+"fleet")),
		member: cluster.Member{ID: o.Instance, App: o.App},
		stop:   make(chan struct{}),
		queue:  make(chan *pending, 4096),
	}
	r.instances.Store(int64(o.ExpectedInstances))
	m.remote.Store(1)
	r.wg.Add(1 + flushers)
	go r.heartbeats()
	for range flushers {
		go r.flush()
	}
	return r
}

// heartbeats records this replica as alive and counts the live ones every
// second, until close.
func (r *redisCounters) heartbeats() {
	defer r.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 4*r.opts.Timeout)
		live, _, err := r.store.BeatEpoch(ctx, r.member, 3*time.Second)
		cancel()
		if err == nil && live > 0 {
			r.instances.Store(int64(live))
		}
		select {
		case <-r.stop:
			ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
			_ = r.store.Leave(ctx, r.member)
			cancel()
			return
		case <-t.C:
		}
	}
}

func (r *redisCounters) close() {
	close(r.stop)
	r.wg.Wait()
}

func (r *redisCounters) Add(ctx context.Context, now int64, hits []hit, after []uint64) error {
	wall := time.Now().UnixNano()
	if r.failing.Load() && wall < r.nextProbe.Load() {
		return r.fallback(ctx, now, hits, after)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	it := &pending{hits: hits, now: now, after: make([]uint64, len(hits)), done: make(chan struct{})}
	select {
	case r.queue <- it:
	case <-ctx.Done():
		return r.fallback(context.Background(), now, hits, after)
	}
	select {
	case <-it.done:
	case <-ctx.Done():
		// Late: decided locally. The hits will still be counted in Redis
		// when the batch runs, which can only refuse more, never admit more.
		return r.fallback(context.Background(), now, hits, after)
	}
	if it.err != nil {
		return r.fallback(context.Background(), now, hits, after)
	}
	copy(after, it.after)
	r.seed(now, hits, after)
	return nil
}

// pending is one request's hits waiting for a batch.
type pending struct {
	hits  []hit
	now   int64
	after []uint64 // the counts, written by the flusher before done is closed
	err   error
	done  chan struct{}
}

// flushers is how many batches may be in flight at once.
const flushers = 4

// maxBatch bounds the requests of one pipeline.
const maxBatch = 256

// flush sends the queued requests to Redis, all those waiting in one
// pipeline (one round trip, and one read and one write for Redis, however
// many requests arrived together), until close.
func (r *redisCounters) flush() {
	defer r.wg.Done()
	batch := make([]*pending, 0, maxBatch)
	for {
		select {
		case <-r.stop:
			return
		case it := <-r.queue:
			batch = append(batch[:0], it)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case it := <-r.queue:
				batch = append(batch, it)
			default:
				break drain
			}
		}
		r.exec(batch)
	}
}

// exec runs one batch in one pipeline: an INCRBY and an EXPIRE per hit.
func (r *redisCounters) exec(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
	defer cancel()
	pipe := r.client.Pipeline()
	cmds := make([][]*redis.IntCmd, len(batch))
	for b, it := range batch {
		cmds[b] = make([]*redis.IntCmd, len(it.hits))
		for i, h := range it.hits {
			key := r.opts.Prefix + h.Key
			cmds[b][i] = pipe.IncrBy(ctx, key, int64(h.Addend))
			// A TTL relative to this replica's clock (to the end of the
			// window, and a second), as envoyproxy/ratelimit's EXPIRE:
			// a replica whose clock is off does not make keys live
			// forever or expire at once.
			pipe.Expire(ctx, key, time.Duration(h.Expires-it.now+1)*time.Second)
		}
	}
	_, err := pipe.Exec(ctx)
	if err != nil {
		r.failing.Store(true)
		r.nextProbe.Store(time.Now().Add(r.opts.ProbeInterval).UnixNano())
		r.metrics.remote.Store(0)
	} else if r.failing.Swap(false) {
		r.metrics.remote.Store(1)
	}
	for b, it := range batch {
		it.err = err
		if err == nil {
			for i, c := range cmds[b] {
				it.after[i] = uint64(c.Val())
			}
		}
		close(it.done)
	}
}

// seed raises this replica's fallback counters to its share of the fleet's
// counts, ceil(count/n), so that if Redis is lost in this window the
// replicas together admit what is left of the limit, not a whole limit more.
func (r *redisCounters) seed(now int64, hits []hit, after []uint64) {
	n := uint64(max(1, r.instances.Load()))
	floor := make([]uint64, len(after))
	for i, a := range after {
		floor[i] = (a + n - 1) / n
	}
	r.local.Raise(now, hits, floor)
}

// fallback counts on this replica alone and scales the count by the
// replicas, so that the service, comparing it with the limit, admits this
// replica's share: limit/n per window.
func (r *redisCounters) fallback(ctx context.Context, now int64, hits []hit, after []uint64) error {
	if err := r.local.Add(ctx, now, hits, after); err != nil {
		return err
	}
	n := uint64(max(1, r.instances.Load()))
	for i := range after {
		r.metrics.fallback.Add(1)
		if after[i] > (1<<63)/n {
			after[i] = 1 << 63
		} else {
			after[i] *= n
		}
	}
	return nil
}
