package rls

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
)

// DefaultApp is the application sluice-rls follows in a rule store and
// shares budgets as, unless ServerOptions.App names another.
const DefaultApp = "sluice-rls"

// storeSchemes are the schemes of a rule store's URL in -rules; anything
// else is a rule file's path.
var storeSchemes = []string{"redis", "rediss", "postgres", "postgresql", "mysql"}

// isStoreURL reports whether a -rules value names a rule store.
func isStoreURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	return ok && slices.Contains(storeSchemes, strings.ToLower(scheme))
}

// openRuleStore opens the rule store at o.Rules: Redis (redis://,
// rediss://, under o.Prefix, as the dashboard keeps rules in Redis), or
// PostgreSQL and MySQL through sqlstore.Open, which parses those URLs for
// the dashboard's -rules too. It checks the store answers within 10 s.
func openRuleStore(ctx context.Context, o ServerOptions) (cluster.RuleStore, func(), error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if scheme, _, _ := strings.Cut(o.Rules, "://"); strings.HasPrefix(strings.ToLower(scheme), "redis") {
		ro, err := redis.ParseURL(o.Rules)
		if err != nil {
			return nil, nil, fmt.Errorf("rls: -rules: %w", err)
		}
		ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
		ro.ContextTimeoutEnabled = true
		rdb := redis.NewClient(ro)
		if err := rdb.Ping(octx).Err(); err != nil {
			rdb.Close()
			return nil, nil, fmt.Errorf("rls: -rules: the rule store at %s: %w", redactURL(o.Rules), err)
		}
		return sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: o.Prefix}), func() { rdb.Close() }, nil
	}
	s, err := sqlstore.Open(octx, o.Rules, sqlstore.Config{OnWatchError: func(app string, err error) {
		if err != nil {
			o.Log.Warn("rule store watch lost its connection; the rules in force stay", "app", app, "err", err)
		} else {
			o.Log.Info("rule store watch connected again", "app", app)
		}
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("rls: -rules: %w", err)
	}
	return s, func() { s.Close() }, nil
}

// redactURL is u without its password.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unparsable URL)"
	}
	return p.Redacted()
}

// rulesEngine makes the engine of -rules; with o.Redis its flow and param
// rules share their budgets through sluice's cluster store in that Redis
// (docs/design/cluster.md), and the Redis client is returned to publish
// telemetry there.
func rulesEngine(o ServerOptions) (*sluice.Engine, *redis.Client, error) {
	if o.Redis == "" {
		return sluice.New(o.EngineOptions...), nil, nil
	}
	ro, err := redis.ParseURL(o.Redis)
	if err != nil {
		return nil, nil, fmt.Errorf("rls: -redis: %w", err)
	}
	timeout := o.RedisOptions.Timeout
	if timeout <= 0 {
		timeout = 250 * time.Millisecond
	}
	// cluster/redis's advice: never retry a decision, honour the deadline,
	// timeouts above the engine's, one connection set up in one round trip.
	ro.MaxRetries, ro.DialerRetries = -1, 1
	ro.DialTimeout = 100 * time.Millisecond
	ro.ReadTimeout, ro.WriteTimeout = 4*timeout, 4*timeout
	ro.ContextTimeoutEnabled = true
	ro.Protocol, ro.DisableIdentity = 2, true
	rdb := redis.NewClient(ro)
	store := sluiceredis.New(rdb, sluiceredis.WithPrefix(o.Prefix))
	cc := sluice.ClusterConfig{App: o.App, Timeout: timeout, ExpectedInstances: o.RedisOptions.ExpectedInstances}
	opts := append(slices.Clip(o.EngineOptions), sluice.WithCluster(store, cc))
	return sluice.New(opts...), rdb, nil
}

// shareAll gives every flow and param rule of set without a cluster
// section the default one (the fleet's total, leases, the local
// fallback; strict for an exact flow rule), so that with -redis every
// limit is the fleet's; a rule that has one keeps it. set's slices are
// copied, not changed.
func shareAll(set rules.Set) rules.Set {
	set.Flow, set.Param = slices.Clone(set.Flow), slices.Clone(set.Param)
	for i := range set.Flow {
		if f := &set.Flow[i]; f.Cluster == nil {
			// An exact window is, shared, a strict rule: every decision
			// in Redis, exact per window of Redis's clock.
			f.Cluster, f.Exact = &rules.Cluster{Strict: f.Exact}, false
		}
	}
	for i := range set.Param {
		if set.Param[i].Cluster == nil {
			set.Param[i].Cluster = &rules.Cluster{}
		}
	}
	return set
}

// errShared explains a refusal of a set shareAll changed.
func errShared(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (with -redis every flow and param rule is shared: a rule that cannot be, such as a warm-up, is refused)", err)
}

// joinStore follows o.App's rules in the rule store at o.Rules with
// fleet.Join, loading each version with load; the returned function
// leaves the fleet and closes the store.
func joinStore(ctx context.Context, o ServerOptions, eng *sluice.Engine, load func(rules.Set) error, tel cluster.Telemetry) (func(), error) {
	store, closeStore, err := openRuleStore(ctx, o)
	if err != nil {
		return nil, err
	}
	cfg := fleet.Config{App: o.App, Rules: store, Load: load, Telemetry: tel, OnError: func(err error) {
		o.Log.Error("rule store failed; the rules in force stay", "err", err)
	}}
	if o.ReloadInterval > 0 {
		cfg.CheckInterval = o.ReloadInterval
	}
	m, err := fleet.Join(eng, cfg)
	if err != nil {
		closeStore()
		return nil, err
	}
	if st := m.Status(); st.Version == 0 && st.RefusedErr == nil {
		o.Log.Warn("no rules in the rule store yet: every descriptor is answered OK until some are saved", "app", o.App, "err", st.Err)
	}
	return func() { m.Close(); closeStore() }, nil
}
