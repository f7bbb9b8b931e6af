// Package sluiceredis implements cluster.Store on Redis: budgets shared by
// every instance of a service ("5,000/s for this API in total", "20 posts
// per hour per user, whichever pod serves them"), decided by Lua scripts on
// Redis's clock.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
//		Addrs:                 []string{"redis:6379"},
//		MaxRetries:            -1,   // never retry a decision
//		MaxRedirects:          -1,   // Cluster: nor redirect one
//		DialerRetries:         1,    // one dial attempt
//		DialTimeout:           100 * time.Millisecond,
//		ReadTimeout:           time.Second, // above the engine's Timeout
//		WriteTimeout:          time.Second,
//		ContextTimeoutEnabled: true, // honour the caller's deadline
//	})
//	store := sluiceredis.New(rdb, sluiceredis.WithPrefix("shop"))
//
// # Clients
//
// New takes any redis.UniversalClient: a *redis.Client for one server or for
// a Sentinel-managed primary (UniversalOptions.MasterName, with the
// Sentinels' addresses in Addrs), or a *redis.ClusterClient for Redis Cluster (several
// Addrs, or IsClusterMode). Authentication and encryption are the client's:
// set Username and Password (Redis 6 ACL; Password alone for requirepass), or
// CredentialsProvider for rotating credentials, SentinelUsername and
// SentinelPassword for the Sentinels, and TLSConfig for TLS. The Store never
// sends AUTH itself. Scripts need EVALSHA and EVAL (ACL category
// @scripting) plus the commands they run (@read, @write: TIME, HMGET, HSET,
// PEXPIRE, GET, SET, ZADD, ZRANGE, ZRANGEBYSCORE, ZREMRANGEBYSCORE, ZREVRANGE,
// ZREM, ZCARD, EXISTS) on keys under the prefix (an ACL key pattern such as
// ~shop:*).
//
// The Sentinel failover (a killed primary, the replica promoted) is tested
// end to end against real Sentinels; docs/design/cluster.md ("Sentinel failover")
// gives what it does to budgets and how long decisions fall back.
//
// # Deadlines and retries
//
// The engine calls Take on its decision path with a tight deadline in ctx
// and falls back to a local decision when Take fails. The Store sends each
// call once and never retries; the client must not retry either, because a
// script that ran but whose reply was lost would be charged twice:
//
//   - MaxRetries: -1 (0 means go-redis's default of 3 retries).
//   - Redis Cluster: MaxRedirects: -1 as well. go-redis counts network
//     errors and MOVED/ASK redirects against MaxRedirects; with -1 a call
//     that meets a moved slot fails (the engine falls back) and the client
//     reloads the slot map for the next one. MaxRedirects: 1 follows one
//     redirect at the price of possibly deciding a timed-out call twice.
//   - ContextTimeoutEnabled: true. Without it go-redis ignores the
//     context's deadline on the socket and a call to a silent Redis blocks
//     for ReadTimeout (3 s by default) and its retries; the Store then runs
//     each call on a goroutine of its own so as to return at the deadline
//     all the same, which costs a goroutine per call, and leaves the
//     abandoned call to end within the client's timeouts.
//   - DialTimeout of about 100 ms; ReadTimeout and WriteTimeout above the
//     engine's Timeout (250 ms by default), bounds for callers without a
//     deadline: go-redis ends a call at the earlier of the context's
//     deadline and its own timeouts, so a 50 ms ReadTimeout would fail the
//     calls the engine still waits for on a busy host; DialerRetries: 1
//     (retried dials send nothing, so they are safe, but they spend the
//     deadline).
//   - SetLogger routes go-redis's own log lines (one per failed dial) to an
//     slog.Logger, one line per run of like lines.
//
// # Key layout
//
// Every key starts with the prefix (WithPrefix, default "sluice"), which
// separates applications sharing a Redis. User strings inside a hash tag
// are escaped ('%' → %25, '{' → %7B, '}' → %7D), so each tag is exactly the
// Store's and all the keys of one budget, or of one app's heartbeats, live
// in one Cluster slot:
//
//	<prefix>:{<key>}:tb       hash   token bucket: t (tokens, %.17g), ts (µs)
//	<prefix>:{<key>}:sw       hash   sliding window: n (permits in the log), seq
//	<prefix>:{<key>}:sw:log   zset   sliding window: member "<seq>:<permits>", score grant time µs
//	<prefix>:{<key>}:gcra     string pacing: theoretical arrival time µs (%.17g)
//	<prefix>:app:{<app>}:members    zset   member IDs, score expiry ms
//	<prefix>:app:{<app>}:m:<id>     hash   id, host, started (Unix ns), rv
//
// The algorithm is part of the key, so changing a budget's algorithm starts
// it afresh instead of meeting a key of another type. Every key has a TTL
// and a crashed instance leaves nothing behind: a bucket lives until it
// would be full again plus one Interval ((Burst-tokens)/rate + Interval,
// 2×Interval for an emptied bucket with Burst = Limit); a window's keys live
// 2×Interval after their last write; a TAT lives Interval past the last
// permit it schedules; a heartbeat record lives its ttl and the app's index
// as long as its longest-lived member. A missing key means a full bucket,
// an empty window, or no permit scheduled.
//
// # Algorithms
//
// Each call is one script that reads TIME once (µs since the epoch, exact
// in a double until the year 2255) and decides all its requests at that
// instant, in order, so requests for one budget in one batch see each
// other. It reads each budget's keys once, keeps the state in a table
// while it decides the batch, and writes it once at the end: k requests
// for one budget (a strict rule's concurrent entries) cost one read and
// one write, and a window's grants of one call are one log entry. Instances' clocks play no part. Lua numbers are doubles: fractions
// are stored and returned as %.17g strings, which round-trip exactly, and a
// Take reply is a single string. With L = Limit, I = Interval (µs), n the
// permits asked:
//
// Token bucket (rate r = L/I per µs, capacity B = Burst, or L when zero).
// The level at time t is min(B, level(t0) + (t-t0)·r), where t0 is the
// time of the last call (no refill thread; a clock that steps back refills
// nothing). A request takes n if level >= n; a partial request otherwise
// takes floor(level) if that is at least 1. This is golang.org/x/time/rate's
// AllowN on a limiter of rate r and burst B, and the tests replay arrivals
// on both. The level and time are stored on every call. When fewer than n
// are granted, RetryAfter = (n - g - level')/r with g granted and level'
// left: the time until the rest is there, x/time/rate's reservation delay;
// zero when n - g exceeds B (it never will be).
//
// Sliding window. The log holds every grant of the last I with its
// permits; used(t) = Σ permits of grants with score > t - I (older ones are
// removed first, in O(log N + removed)). A request takes n if used + n <= L,
// a partial one floor(L - used) if at least 1. Bound: in any window [t, t+I)
// let s be the last grant inside it; every other grant inside is at s' with
// t <= s' <= s < t + I, hence s' > s - I, so it was counted in used(s), and
// the decision at s kept the window's sum at most L. The window is exact,
// not an approximation: no fixed-window doubling at the edges, and nothing
// is refused that fits. The log holds at most one entry per grant in the
// last I (at most L entries; fewer when leases carry many permits each).
// When fewer than n are granted, RetryAfter is when enough of the oldest
// grants leave (score + I - now of the grant that frees the last needed
// permit), exact when they are among the 128 oldest entries and otherwise
// the 128th's departure, a lower bound; zero when n - g exceeds L.
//
// Pacing (GCRA, T = I/L between permits). The key holds the theoretical
// arrival time TAT of the next permit. At now, tat = max(TAT, now) and
// wait = tat - now. If wait > MaxQueue nothing is granted and RetryAfter =
// wait - MaxQueue (when wait would be MaxQueue had nothing else arrived).
// Otherwise all n are granted with Wait = wait, the i-th permit due at
// now + wait + i·T, and TAT becomes tat + n·T. Permits of all grants are
// thus due at least T apart. Partial changes nothing: a pacing grant is
// scheduled, not limited by stock, so a caller asks for what it will use
// within MaxQueue and gives the rest back.
//
// Give returns n permits: a bucket's level rises by n, capped at B (an
// absent, hence full, bucket is left alone); a window forgets its n most
// recent permits (newest grants first, the last one touched keeps its
// time and the remainder); a TAT moves back by n·T but never before now.
//
// # Batches and Redis Cluster
//
// On one server a Take is one EVALSHA whatever the batch: a lone token
// bucket or pacing request (a strict rule's usual call) runs a script of
// its own, the same decision over the same keys without the batch's
// bookkeeping; anything else runs the batch script. On Redis Cluster
// a script may only touch keys of one slot, so Take groups the requests by
// the slot of their budget's tag (CRC16 mod 16384, as CLUSTER KEYSLOT) and
// sends one EVALSHA per slot in one pipeline; go-redis sends each node its
// share concurrently, so the call costs one round trip. Members reads the
// member records named by the index from inside its script; they share the
// index's tag, hence its slot. Other sharded clients (redis.Ring) are
// grouped per budget.
//
// Scripts are run by SHA. After SCRIPT FLUSH, a restart or a failover to a
// node that never saw them, Redis answers NOSCRIPT and nothing has run;
// the Store then sends those invocations again with EVAL (which also caches
// the script), its only second round trip. Load preloads the scripts.
//
// # Failures
//
// An error from Take means its grants must not be used; the caller falls
// back. The Store never over-grants because of a failure, but it may
// under-grant: on Cluster, when one node fails, the slots that answered
// have been charged; a reply lost to a timeout may have been charged. State
// lives in memory and is lost with it: a restarted Redis starts with full
// buckets and empty windows, and after a failover the new primary may miss
// the last writes its primary did not replicate in time (Redis replication
// is asynchronous), admitting up to those permits again. Configure
// maxmemory-policy noeviction (a full Redis then fails writes, and the
// engine falls back) rather than an evicting policy, which would silently
// forget budgets. Redis 4.0 or later; tested with Redis 7.
//
// # Rule store and telemetry
//
// RuleStore (NewRuleStore) implements cluster.RuleStore: versioned rule
// documents per application with their history, conflict-checked saves
// that are one Lua script each (atomic, on Redis's clock), a pub/sub
// channel per application for its followers (package fleet), the instances'
// reports with TTLs and a capped audit log. Telemetry (NewTelemetry) implements
// cluster.Telemetry: each instance's last frames, expiring when it stops
// publishing. Neither is on a decision path: their client may retry. They
// also need SADD, SMEMBERS, LPUSH, LTRIM, LRANGE, LREM, LLEN, RPOP, DEL,
// HDEL, HVALS, TYPE, PUBLISH and SUBSCRIBE. Keys and scripts are described
// in docs/design/rule-store.md.
package sluiceredis
