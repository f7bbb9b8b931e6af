package sluiceredis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
)

// Algorithm codes on the wire (the scripts' first token of a request).
const (
	algBucket   byte = '1'
	algWindow   byte = '2'
	algPacing   byte = '3'
	algCalendar byte = '4'
)

// maxN is the largest permit count a request or Give may carry: Lua numbers
// are doubles, exact up to 2^53.
const maxN = 1 << 53

// DefaultPrefix is the key prefix of a Store built without WithPrefix.
const DefaultPrefix = "sluice"

// Store is the Redis implementation of cluster.Store. It is safe for
// concurrent use. Build it with New.
type Store struct {
	c      redis.UniversalClient
	prefix string
	// group is how requests are split into script invocations: one for a
	// single server, by Cluster slot, or by budget for other sharded clients.
	group grouping
	// onTake, in tests, sees the Redis time (µs) at which a take script
	// decided the requests idx.
	onTake func(nowMicros int64, idx []int)
	pool   sync.Pool // *batch
	// detach is set when the client ignores contexts' deadlines on its
	// sockets (ContextTimeoutEnabled false): each call then runs on a
	// goroutine of its own, which the caller leaves when ctx ends.
	detach bool
}

type grouping uint8

const (
	groupNone   grouping = iota // *redis.Client: one script for the batch
	groupSlot                   // *redis.ClusterClient: one script per slot
	groupBudget                 // anything else (Ring...): one per budget
)

var _ cluster.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the Store writes, which separates
// applications (or environments) sharing one Redis. The default is
// DefaultPrefix, "sluice". Braces and '%' in the prefix are escaped so that
// it never forms a Cluster hash tag.
func WithPrefix(p string) Option {
	return func(s *Store) { s.prefix = escapeTag(p) }
}

// New returns a Store that keeps its budgets in the Redis that client
// reaches: a *redis.Client (one server, or a Sentinel-managed primary
// through redis.NewFailoverClient) or a *redis.ClusterClient, as
// redis.NewUniversalClient builds them. Credentials (ACL Username and
// Password, or a CredentialsProvider) and TLS (TLSConfig) are the client's
// options; the Store sends no AUTH of its own.
//
// The Store never retries: each method sends its commands once, and a
// failure or the end of ctx is returned to the caller. Configure the client
// so that it does not retry either (see the package documentation): a
// retried Take could be decided twice.
//
// Every method returns when its context ends, whatever the client's
// options: with ContextTimeoutEnabled false (go-redis's default) the
// client would wait on a silent Redis for its ReadTimeout (3 s by default)
// and retry, so the Store then runs each call on a goroutine of its own
// and returns at the context's end, leaving the call to finish in the
// background, within the client's timeouts or at its Close. That costs a
// goroutine and a copy per call; ContextTimeoutEnabled: true avoids both.
//
// New does not contact Redis; Load does, optionally, ahead of the first
// Take. Closing client is the caller's business.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{c: client, prefix: DefaultPrefix, detach: !honoursDeadlines(client)}
	switch client.(type) {
	case *redis.Client:
		s.group = groupNone
	case *redis.ClusterClient:
		s.group = groupSlot
	default:
		s.group = groupBudget
	}
	for _, o := range opts {
		o(s)
	}
	s.pool.New = func() any { return new(batch) }
	return s
}

// Load loads the Store's scripts into the script cache of every primary, so
// that the first Take is one EVALSHA instead of an EVALSHA answered NOSCRIPT
// followed by an EVAL. Calling it is optional: the Store reloads scripts on
// NOSCRIPT by itself (after SCRIPT FLUSH, a restart or a failover).
func (s *Store) Load(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, sc := range allScripts {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("sluiceredis: load scripts: %w", err)
			}
		}
		return nil
	}
	// A ClusterClient loads a script into every shard by itself.
	if r, ok := s.c.(*redis.Ring); ok {
		return r.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return load(ctx, c)
		})
	}
	return load(ctx, s.c)
}

// honoursDeadlines reports whether c bounds its socket reads and writes
// by the context's deadline.
func honoursDeadlines(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// bounded runs call and returns its error, or, on a Store that detaches
// its calls (see New), the end of ctx if that comes first; call then goes
// on, on its own goroutine, and must touch only what it owns.
func (s *Store) bounded(ctx context.Context, op string, call func() error) error {
	if !s.detach || ctx.Done() == nil {
		return call()
	}
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("sluiceredis: %s: %w", op, context.Cause(ctx))
	}
}

// batch is the scratch space of one Take.
type batch struct {
	keys  []string
	argv  []byte
	order []int    // request indexes, grouped
	bound []int    // group boundaries in order
	slots []uint16 // Cluster slot of each request
	cmds  []*redis.Cmd
	redo  []int
}

// Take decides every request of reqs in one round trip and writes the
// answers to grants: one script invocation on a single server; on Redis
// Cluster, one per slot holding a requested budget, sent together in one
// pipeline. Requests for the same budget are decided in order, each seeing
// the ones before it.
//
// A request that is invalid (empty key, unknown algorithm, Limit or
// Interval not positive, N below 1 or above 2^53, negative Burst or
// MaxQueue, NaN or infinite figures) fails the whole call before anything
// is sent. An error after sending means no grant may be used; on Cluster
// the slots that answered have been charged (the Store errs on the side of
// admitting less, never more).
//
// The only second round trip is after NOSCRIPT (the server lost its script
// cache): the invocations refused that way did nothing and are sent again
// with the script's source.
func (s *Store) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	if len(grants) != len(reqs) {
		return fmt.Errorf("sluiceredis: %d grants for %d requests", len(grants), len(reqs))
	}
	if len(reqs) == 0 {
		return nil
	}
	for i := range reqs {
		if err := checkRequest(&reqs[i]); err != nil {
			return err
		}
	}
	if s.detach && ctx.Done() != nil {
		// The call may outlive this one: it gets copies.
		rs, gs := slices.Clone(reqs), make([]cluster.Grant, len(grants))
		err := s.bounded(ctx, "take", func() error { return s.take(ctx, rs, gs) })
		if err == nil {
			copy(grants, gs)
		}
		return err
	}
	return s.take(ctx, reqs, grants)
}

// take is Take once the requests are checked.
func (s *Store) take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	b := s.pool.Get().(*batch)
	defer s.putBatch(b)
	s.groupRequests(b, reqs)

	ngroups := len(b.bound) - 1
	if ngroups == 1 {
		keys, argv := s.encode(b, reqs, b.order)
		script := takeScript
		if len(reqs) == 1 && reqs[0].Budget.Algorithm != cluster.SlidingWindow && reqs[0].Budget.Algorithm != cluster.Calendar {
			script = takeOneScript
		}
		res, err := script.Run(ctx, s.c, keys, argv).Text()
		if err != nil {
			return fmt.Errorf("sluiceredis: take: %w", err)
		}
		return s.decode(res, b.order, grants)
	}

	// Several slots: one EVALSHA each, in one pipeline; any group refused
	// with NOSCRIPT is sent again with EVAL.
	pipe := s.c.Pipeline()
	for g := 0; g < ngroups; g++ {
		idx := b.order[b.bound[g]:b.bound[g+1]]
		keys, argv := s.encode(b, reqs, idx)
		b.cmds = append(b.cmds, takeScript.EvalSha(ctx, pipe, keys, argv))
	}
	_, _ = pipe.Exec(ctx)
	b.redo = b.redo[:0]
	for g, cmd := range b.cmds {
		if isNoScript(cmd.Err()) {
			b.redo = append(b.redo, g)
		}
	}
	if len(b.redo) > 0 {
		pipe := s.c.Pipeline()
		for _, g := range b.redo {
			idx := b.order[b.bound[g]:b.bound[g+1]]
			keys, argv := s.encode(b, reqs, idx)
			b.cmds[g] = takeScript.Eval(ctx, pipe, keys, argv)
		}
		_, _ = pipe.Exec(ctx)
	}
	for g, cmd := range b.cmds {
		res, err := cmd.Text()
		if err != nil {
			return fmt.Errorf("sluiceredis: take: %w", err)
		}
		if err := s.decode(res, b.order[b.bound[g]:b.bound[g+1]], grants); err != nil {
			return err
		}
	}
	return nil
}

// putBatch drops b's references to commands and returns it to the pool.
func (s *Store) putBatch(b *batch) {
	clear(b.cmds)
	b.cmds = b.cmds[:0]
	s.pool.Put(b)
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// groupRequests fills b.order with the request indexes grouped by script
// invocation (by slot on Cluster, by budget on other sharded clients; a
// stable sort keeps the requests' order within a group), and b.bound with
// the groups' boundaries.
func (s *Store) groupRequests(b *batch, reqs []cluster.Request) {
	b.order = b.order[:0]
	for i := range reqs {
		b.order = append(b.order, i)
	}
	b.bound = append(b.bound[:0], 0)
	if s.group == groupNone || len(reqs) == 1 {
		b.bound = append(b.bound, len(reqs))
		return
	}
	if s.group == groupSlot {
		b.slots = b.slots[:0]
		for i := range reqs {
			b.slots = append(b.slots, slot(escapeTag(reqs[i].Budget.Key)))
		}
		slots := b.slots
		slices.SortStableFunc(b.order, func(x, y int) int { return cmp.Compare(slots[x], slots[y]) })
		for k := 1; k < len(b.order); k++ {
			if slots[b.order[k]] != slots[b.order[k-1]] {
				b.bound = append(b.bound, k)
			}
		}
	} else {
		slices.SortStableFunc(b.order, func(x, y int) int {
			return strings.Compare(reqs[x].Budget.Key, reqs[y].Budget.Key)
		})
		for k := 1; k < len(b.order); k++ {
			if reqs[b.order[k]].Budget.Key != reqs[b.order[k-1]].Budget.Key {
				b.bound = append(b.bound, k)
			}
		}
	}
	b.bound = append(b.bound, len(reqs))
}

// encode writes the keys and the packed arguments of the requests idx (see
// takeSrc) into b and returns them.
func (s *Store) encode(b *batch, reqs []cluster.Request, idx []int) ([]string, string) {
	b.keys = b.keys[:0]
	a := b.argv[:0]
	for _, i := range idx {
		r := &reqs[i]
		bu := &r.Budget
		alg := wireAlg(bu.Algorithm)
		k1, k2 := s.budgetKeys(escapeTag(bu.Key), alg)
		b.keys = append(b.keys, k1)
		if k2 != "" {
			b.keys = append(b.keys, k2)
		}
		if len(a) > 0 {
			a = append(a, ' ')
		}
		a = append(a, alg, ' ')
		a = strconv.AppendInt(a, r.N, 10)
		if r.Partial {
			a = append(a, " 1 "...)
		} else {
			a = append(a, " 0 "...)
		}
		a = strconv.AppendFloat(a, bu.Limit, 'g', -1, 64)
		a = append(a, ' ')
		a = appendMicros(a, bu.Interval)
		a = append(a, ' ')
		a = strconv.AppendFloat(a, bu.Burst, 'g', -1, 64)
		a = append(a, ' ')
		a = appendMicros(a, bu.MaxQueue)
	}
	b.argv = a
	return b.keys, string(a)
}

// decode reads a take reply into grants[idx[k]].
//
// complexity: parses the script's reply grant by grant, each malformed field an error of its own
func (s *Store) decode(res string, idx []int, grants []cluster.Grant) error {
	bad := func() error { return fmt.Errorf("sluiceredis: take: malformed reply %q", res) }
	field := func() (string, bool) {
		for len(res) > 0 && res[0] == ' ' {
			res = res[1:]
		}
		if res == "" {
			return "", false
		}
		j := 0
		for j < len(res) && res[j] != ' ' {
			j++
		}
		f := res[:j]
		res = res[j:]
		return f, true
	}
	f, ok := field()
	if !ok {
		return bad()
	}
	if s.onTake != nil {
		now, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return bad()
		}
		s.onTake(int64(now), idx)
	}
	for _, i := range idx {
		fg, ok1 := field()
		fw, ok2 := field()
		fr, ok3 := field()
		if !ok1 || !ok2 || !ok3 {
			return bad()
		}
		n, err := strconv.ParseInt(fg, 10, 64)
		if err != nil {
			return bad()
		}
		w, err1 := parseMicros(fw)
		r, err2 := parseMicros(fr)
		if err1 != nil || err2 != nil {
			return bad()
		}
		grants[i] = cluster.Grant{N: n, Wait: w, RetryAfter: r}
	}
	return nil
}

// Give returns n unused permits to budget b in one round trip. A token
// bucket gets n tokens back, never above Burst (a bucket that has expired
// is full and gets nothing); a sliding window forgets its n most recent
// permits still in the window; a pacing budget unschedules its n latest
// permits, never moving its next due time before now. n below 1 is a no-op.
func (s *Store) Give(ctx context.Context, b cluster.Budget, n int64) error {
	if n < 1 {
		return nil
	}
	if err := checkBudget(&b); err != nil {
		return err
	}
	if n > maxN {
		n = maxN
	}
	alg := wireAlg(b.Algorithm)
	k1, k2 := s.budgetKeys(escapeTag(b.Key), alg)
	keys := []string{k1}
	if k2 != "" {
		keys = append(keys, k2)
	}
	var argv [5]string
	argv[0] = string(alg)
	argv[1] = strconv.FormatInt(n, 10)
	argv[2] = strconv.FormatFloat(b.Limit, 'g', -1, 64)
	argv[3] = string(appendMicros(nil, b.Interval))
	argv[4] = strconv.FormatFloat(b.Burst, 'g', -1, 64)
	return s.bounded(ctx, "give", func() error {
		if err := giveScript.Run(ctx, s.c, keys, argv[0], argv[1], argv[2], argv[3], argv[4]).Err(); err != nil {
			return fmt.Errorf("sluiceredis: give: %w", err)
		}
		return nil
	})
}

func wireAlg(a cluster.Algorithm) byte {
	switch a {
	case cluster.TokenBucket:
		return algBucket
	case cluster.SlidingWindow:
		return algWindow
	case cluster.Calendar:
		return algCalendar
	}
	return algPacing
}

func checkRequest(r *cluster.Request) error {
	if err := checkBudget(&r.Budget); err != nil {
		return err
	}
	if r.N < 1 || r.N > maxN {
		return fmt.Errorf("sluiceredis: budget %q: N %d out of [1, 2^53]", r.Budget.Key, r.N)
	}
	return nil
}

func checkBudget(b *cluster.Budget) error {
	switch {
	case b.Key == "":
		return errors.New("sluiceredis: empty budget key")
	case b.Algorithm < cluster.TokenBucket || b.Algorithm > cluster.Calendar:
		return fmt.Errorf("sluiceredis: budget %q: unknown algorithm %d", b.Key, b.Algorithm)
	case !(b.Limit > 0) || math.IsInf(b.Limit, 0):
		return fmt.Errorf("sluiceredis: budget %q: limit %v not positive and finite", b.Key, b.Limit)
	case b.Interval < time.Microsecond:
		return fmt.Errorf("sluiceredis: budget %q: interval %v below 1µs", b.Key, b.Interval)
	case !(b.Burst >= 0) || math.IsInf(b.Burst, 0):
		return fmt.Errorf("sluiceredis: budget %q: burst %v negative or not finite", b.Key, b.Burst)
	case b.MaxQueue < 0:
		return fmt.Errorf("sluiceredis: budget %q: negative max queue %v", b.Key, b.MaxQueue)
	}
	return nil
}

// appendMicros appends d in microseconds, with the nanoseconds as a
// fraction when there are any.
func appendMicros(a []byte, d time.Duration) []byte {
	if d%time.Microsecond == 0 {
		return strconv.AppendInt(a, int64(d/time.Microsecond), 10)
	}
	return strconv.AppendFloat(a, float64(d)/1e3, 'g', -1, 64)
}

// parseMicros reads a span in µs written by a script, rounding up to the
// nanosecond so that a wait is never shorter than the script's.
func parseMicros(f string) (time.Duration, error) {
	if f == "0" {
		return 0, nil
	}
	us, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0, err
	}
	ns := math.Ceil(us * 1e3)
	if ns <= 0 {
		return 0, nil
	}
	if ns >= math.MaxInt64 {
		return math.MaxInt64, nil
	}
	return time.Duration(ns), nil
}
