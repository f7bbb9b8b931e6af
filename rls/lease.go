package rls

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases of fixed windows (docs/rls.md, "Leases"). A replica takes a block
// of a window's budget from Redis, atomically and never past the limit
// (leaseScript), decides locally from it, and asks again when it runs short
// or low. The Redis key is the same counter exact mode increments, holding
// the hits granted so far (admitted or leased), so the fleet never admits
// more than the limit in one aligned window while Redis answers, whatever
// the mix of replicas in either mode.
//
// A block is at most max(shortfall, ⌊left/(2N)⌋), where left is what Redis
// has left of the limit and N the live replicas: half of what is left, split
// among the replicas, so blocks shrink to one hit near the limit. Within
// that, a replica asks for the hits it used in the last lease period (its
// rate), at most twice its last block; its first block of a window is the
// cap. A lease not used for a lease period is given back (DECRBY) while its
// window has more than a period to run; so is every lease on close.
//
// Under-admission: the fleet admits less than the limit only by the hits
// leased and not used when the window ends: the last blocks of replicas
// that stopped asking for the counter within a lease period of the
// window's end (or were lost), each at most ⌈limit/(2N)⌉; none while every
// replica's demand outlasts its lease (TestLeaseFleetExact).

// leaseScript grants a block of a window's budget: ARGV limit, shortfall
// (the least grant worth having), want, replicas, TTL. It grants nothing
// when Redis has less than the shortfall left, else
// max(shortfall, min(want, ⌊left/(2N)⌋)); it returns the grant and the
// count after it.
var leaseScript = redis.NewScript(`
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit, short, want, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local left = limit - used
if left < short or left <= 0 then
  return {0, used}
end
local g = math.max(short, math.min(want, math.floor(left / (2 * n))))
if g > 0 then
  used = redis.call('INCRBY', KEYS[1], g)
  if used == g then
    redis.call('EXPIRE', KEYS[1], ARGV[5])
  end
end
return {g, used}
`)

// giveScript gives back ARGV[1] unused hits of a live key, never below zero.
var giveScript = redis.NewScript(`
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = math.min(used, tonumber(ARGV[1]))
if n > 0 then
  redis.call('DECRBY', KEYS[1], n)
end
return n
`)

// DefaultLeasePeriod is the lease period when RedisOptions.LeasePeriod is 0.
const defaultLeasePeriod = time.Second

// leaseCounters decides from leases of each window's budget; see above.
type leaseCounters struct {
	*redisCounters
	now    func() time.Time
	period time.Duration
	seed   maphash.Seed
	shards [localShards]leaseShard
	epoch  atomic.Uint64 // Redis failures seen: a lease of an older epoch is not given back
	asks   chan *leaseAsk

	maxPerShard int
	returned    atomic.Uint64 // leases given back
	asked       atomic.Uint64 // asks for blocks sent
}

type leaseShard struct {
	mu sync.Mutex
	m  map[string]*lease
}

// lease is one replica's share of one counter in one window.
type lease struct {
	left     uint64 // leased and not used
	debt     uint64 // hits the fallback admitted while an ask was late, to pay from the next grant
	used     uint64 // Redis's count at its last answer
	block    uint64 // the last grant
	granted  int64  // when (ns)
	lastUse  int64  // ns
	since    uint64 // hits taken since the last grant
	expires  int64  // Unix seconds
	epoch    uint64
	known    bool      // Redis has answered for it
	answered int64     // when it last answered (ns)
	fetching *leaseAsk // in flight
}

// charge records hits the fallback admitted while an ask for h's lease
// was late: they are paid from the lease's next grants, so that a late
// grant is not used a second time.
func (c *leaseCounters) charge(h hit, now int64) {
	s := &c.shards[maphash.String(c.seed, h.Key)%localShards]
	s.mu.Lock()
	if l := s.m[h.Key]; l != nil && l.expires > now {
		l.debt = satAdd(l.debt, h.Addend)
		l.pay()
	}
	s.mu.Unlock()
}

// pay pays the lease's debt from its unused hits.
func (l *lease) pay() {
	p := min(l.left, l.debt)
	l.left -= p
	l.debt -= p
}

// fleetCount is the hits the fleet has admitted as this replica knows:
// Redis's count less this lease's unused hits (a Redis restarted without
// its data may count fewer than the lease holds).
func (l *lease) fleetCount() uint64 { return satAdd(l.used-min(l.left, l.used), l.debt) }

// leaseAsk is one request for a block, answered by a flusher.
type leaseAsk struct {
	key                string
	l                  *lease
	limit, short, want uint64
	n                  int64
	ttl                int64
	grant, used        uint64
	err                error
	done               chan struct{}
}

func newLeaseCounters(client redis.UniversalClient, o RedisOptions, m *metrics, maxKeys int, now func() time.Time) *leaseCounters {
	if now == nil {
		now = time.Now
	}
	if o.LeasePeriod <= 0 {
		o.LeasePeriod = defaultLeasePeriod
	}
	c := &leaseCounters{
		redisCounters: newRedisCounters(client, o, m, maxKeys),
		now:           now, period: o.LeasePeriod, seed: maphash.MakeSeed(),
		asks: make(chan *leaseAsk, 4096), maxPerShard: max(1, maxKeys/localShards),
	}
	if maxKeys <= 0 {
		c.maxPerShard = (1 << 20) / localShards
	}
	for i := range c.shards {
		c.shards[i].m = map[string]*lease{}
	}
	c.wg.Add(leaseFlushers + 1)
	for range leaseFlushers {
		go c.flushLeases()
	}
	go c.giveBackIdle()
	return c
}

func (c *leaseCounters) close() {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	c.giveBack(ctx, func(*lease) bool { return true })
	cancel()
	c.redisCounters.close()
}

func (c *leaseCounters) Add(ctx context.Context, now int64, hits []hit, after []uint64) error {
	for i, h := range hits {
		a, err := c.take(ctx, now, h)
		switch {
		case err == errLeasesFull:
			// Too many counters leased: count this one in Redis.
			err = c.redisCounters.Add(ctx, now, hits[i:i+1], after[i:i+1])
		case err != nil:
			// Redis failing or late, and the lease short: the fallback,
			// its counter raised first to this replica's share of the
			// fleet's count as the lease knows it (a, which counts the
			// hits this replica admitted from its leases).
			n := uint64(max(1, c.instances.Load()))
			c.local.Raise(now, hits[i:i+1], []uint64{(a + n - 1) / n})
			err = c.fallback(context.Background(), now, hits[i:i+1], after[i:i+1])
			if err == nil && after[i] <= h.Limit {
				c.charge(h, now)
			}
		default:
			after[i] = a
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// take decides one hit from its lease, asking Redis for a block when the
// lease is short (waiting) or low (not waiting). It returns the count to
// compare with the limit: the fleet's count as this replica knows it, or
// more than the limit when the hits do not fit; with an error (Redis
// failing or late), the fleet's count as this replica knew it.
func (c *leaseCounters) take(ctx context.Context, now int64, h hit) (uint64, error) {
	s := &c.shards[maphash.String(c.seed, h.Key)%localShards]
	wall := c.now().UnixNano()
	s.mu.Lock()
	l := s.lease(h, now, c.maxPerShard)
	if l == nil {
		s.mu.Unlock()
		return 0, errLeasesFull
	}
	for asked := false; ; {
		if after, ok := c.fromLease(h, l, wall, asked); ok {
			s.mu.Unlock()
			return after, nil
		}
		a := l.fetching
		if a == nil {
			if c.failing.Load() && time.Now().UnixNano() < c.nextProbe.Load() {
				known := l.fleetCount()
				s.mu.Unlock()
				return known, errLeaseUnavailable
			}
			a = c.ask(h, l, h.Addend-min(h.Addend, l.left), c.want(h, l, wall))
			asked = true
		}
		s.mu.Unlock()
		err := c.wait(ctx, a)
		if err == nil {
			err = a.err
		}
		s.mu.Lock()
		if err != nil {
			known := l.fleetCount()
			s.mu.Unlock()
			return known, err
		}
	}
}

// lease returns h's lease, a new one when its window is new, or nil when
// the shard holds max leases already.
func (s *leaseShard) lease(h hit, now int64, max int) *lease {
	l := s.m[h.Key]
	if l == nil || l.expires <= now {
		if l == nil && len(s.m) >= max {
			return nil
		}
		l = &lease{expires: h.Expires}
		s.m[h.Key] = l
	}
	return l
}

// fromLease decides h from its lease without Redis when it can: the lease
// covers it; or Redis, asked for it (asked) or within a period, had less
// left than the lease lacks. The caller holds the shard's lock.
func (c *leaseCounters) fromLease(h hit, l *lease, wall int64, asked bool) (after uint64, ok bool) {
	switch {
	case l.left >= h.Addend && (h.Addend > 0 || l.known):
		l.left -= h.Addend
		l.since += h.Addend
		l.lastUse = wall
		c.refill(h, l, wall)
		return l.fleetCount(), true
	case asked:
		return max(satAdd(l.fleetCount(), h.Addend), satAdd(h.Limit, 1)), true
	case l.known && satAdd(l.used, h.Addend-l.left) > h.Limit && wall-l.answered < int64(c.period):
		// Budget given back is seen a period later at most.
		return satAdd(l.fleetCount(), h.Addend), true
	}
	return 0, false
}

// wait waits for a's answer, at most the timeout (the timer is made only
// here: most decisions do not wait).
func (c *leaseCounters) wait(ctx context.Context, a *leaseAsk) error {
	select {
	case <-a.done:
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errLeaseUnavailable: Redis is failing and the lease cannot cover a hit;
// errLeasesFull: the leases kept are at their bound.
var errLeaseUnavailable, errLeasesFull = errors.New("rls: Redis unavailable"), errors.New("rls: leases full")

// want is the block to ask for: the hits used in the last lease period,
// at most twice the last block, at least the hits asked now; the first
// block of a window is as large as Redis grants (its cap).
func (c *leaseCounters) want(h hit, l *lease, wall int64) uint64 {
	if l.block == 0 {
		return math.MaxUint32
	}
	d := max(wall-l.granted, 1)
	rate := float64(l.since) * float64(c.period) / float64(d)
	w := uint64(min(rate, float64(2*l.block))) + 1
	return max(w, h.Addend)
}

// refill asks for the next block ahead of need when the lease is down to a
// quarter of its block and the block lasted less than a period.
func (c *leaseCounters) refill(h hit, l *lease, wall int64) {
	if l.fetching != nil || l.block == 0 || l.left > l.block/4 || wall-l.granted >= int64(c.period) || l.used >= h.Limit {
		return
	}
	if c.failing.Load() {
		return
	}
	c.ask(h, l, 0, c.want(h, l, wall))
}

// ask queues a request for a block; the caller holds the shard's lock.
func (c *leaseCounters) ask(h hit, l *lease, short, want uint64) *leaseAsk {
	a := &leaseAsk{
		key: c.opts.Prefix + h.Key, l: l, limit: h.Limit, short: short, want: max(want, short),
		n: max(1, c.instances.Load()), ttl: max(1, h.Expires-c.now().Unix()+1), done: make(chan struct{}),
	}
	l.fetching = a
	c.asked.Add(1)
	select {
	case c.asks <- a:
	default:
		a.err = errLeaseUnavailable
		l.fetching = nil
		close(a.done)
	}
	return a
}

// leaseFlushers is how many batches of asks may be in flight at once: one,
// so that the asks that come while a batch is out go together in the next
// (a round trip costs Redis more than the scripts it carries).
const leaseFlushers = 1

// flushLeases sends the queued asks to Redis, those waiting together in
// one pipeline, until close.
func (c *leaseCounters) flushLeases() {
	defer c.wg.Done()
	batch := make([]*leaseAsk, 0, maxBatch)
	for {
		select {
		case <-c.stop:
			return
		case a := <-c.asks:
			batch = append(batch[:0], a)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case a := <-c.asks:
				batch = append(batch, a)
			default:
				break drain
			}
		}
		c.execLeases(batch)
	}
}

func (c *leaseCounters) execLeases(batch []*leaseAsk) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	cmds, err := c.runLeases(ctx, batch)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A restarted Redis: load the script and run the batch again (no
		// grant was made: every command of the batch failed alike).
		if err = leaseScript.Load(ctx, c.client).Err(); err == nil {
			cmds, err = c.runLeases(ctx, batch)
		}
	}
	if err != nil {
		c.epoch.Add(1)
		c.failing.Store(true)
		c.nextProbe.Store(time.Now().Add(c.opts.ProbeInterval).UnixNano())
		c.metrics.remote.Store(0)
	} else if c.failing.Swap(false) {
		c.metrics.remote.Store(1)
	}
	wall := c.now().UnixNano()
	epoch := c.epoch.Load()
	for i, a := range batch {
		if err == nil {
			v, _ := cmds[i].Int64Slice()
			if len(v) == 2 {
				a.grant, a.used = uint64(v[0]), uint64(v[1])
			}
		}
		a.err = err
		s := &c.shards[maphash.String(c.seed, a.key[len(c.opts.Prefix):])%localShards]
		s.mu.Lock()
		l := a.l
		l.fetching = nil
		if err == nil {
			l.left += a.grant
			l.pay()
			l.used = a.used
			l.known, l.answered = true, wall
			if a.grant > 0 {
				l.block, l.granted, l.since, l.epoch = a.grant, wall, 0, epoch
			}
		}
		s.mu.Unlock()
		close(a.done)
	}
}

func (c *leaseCounters) runLeases(ctx context.Context, batch []*leaseAsk) ([]*redis.Cmd, error) {
	pipe := c.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, a := range batch {
		cmds[i] = leaseScript.EvalSha(ctx, pipe, []string{a.key}, a.limit, a.short, a.want, a.n, a.ttl)
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// giveBackIdle gives back, every half period, the leases not used for a
// period whose window runs for more than a period yet, and forgets the
// leases of ended windows, until close.
func (c *leaseCounters) giveBackIdle() {
	defer c.wg.Done()
	t := time.NewTicker(max(c.period/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.sweepIdle()
	}
}

// sweepIdle is one round of giveBackIdle.
func (c *leaseCounters) sweepIdle() {
	wall := c.now().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	c.giveBack(ctx, func(l *lease) bool {
		return wall-l.lastUse >= int64(c.period) && l.expires*1e9-wall > int64(c.period)
	})
}

// giveBack returns the unused hits of the leases idle says to, and forgets
// the leases of ended windows.
func (c *leaseCounters) giveBack(ctx context.Context, idle func(*lease) bool) {
	now := c.now().Unix()
	epoch := c.epoch.Load()
	type back struct {
		key string
		n   uint64
	}
	var give []back
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k, l := range s.m {
			switch {
			case l.expires <= now && l.fetching == nil:
				delete(s.m, k)
			case l.left > 0 && l.fetching == nil && l.epoch == epoch && idle(l):
				give = append(give, back{c.opts.Prefix + k, l.left})
				l.used -= l.left
				l.left = 0
			}
		}
		s.mu.Unlock()
	}
	if len(give) == 0 {
		return
	}
	pipe := c.client.Pipeline()
	for _, g := range give {
		giveScript.EvalSha(ctx, pipe, []string{g.key}, g.n)
	}
	if _, err := pipe.Exec(ctx); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && giveScript.Load(ctx, c.client).Err() == nil {
		pipe = c.client.Pipeline()
		for _, g := range give {
			giveScript.EvalSha(ctx, pipe, []string{g.key}, g.n)
		}
		_, _ = pipe.Exec(ctx)
	}
	c.returned.Add(uint64(len(give)))
}
