package dashboard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// Routes returns the method and pattern of every endpoint, and whether it
// is public, for the authorization matrix's completeness check.
func (d *Dashboard) Routes() (out [][3]string) {
	for _, rt := range d.routes {
		acc := map[access]string{public: "public", read: "read", write: "write", admin: "admin", signedIn: "signed-in"}[rt.access]
		out = append(out, [3]string{rt.method, rt.pattern, acc})
	}
	return out
}

// Sample publishes a frame of the Engine now, as the sampler does each
// second.
func (d *Dashboard) Sample() { d.sampler.publish(context.Background()) }

// Sessions returns the number of sessions kept.
func (d *Dashboard) Sessions() int { return d.sessions.len() }

// Follow makes eng an instance id of app until ctx ends, as the engine's
// own store options would: it loads each new version of app's rules from
// rs (polling every 100 ms), reports what it runs or refused, and
// publishes a frame to tel each second. wait waits for its goroutines.
func Follow(ctx context.Context, eng *sluice.Engine, rs cluster.RuleStore, tel cluster.Telemetry, app, id string) (wait func()) {
	var wg sync.WaitGroup
	var applied atomic.Int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		var seen int64
		for {
			if cur, err := rs.Current(ctx, app); err == nil && cur.Version != seen {
				seen = cur.Version
				rep := cluster.RuleReport{Instance: id, Version: applied.Load()}
				set, err := rules.Decode(cur.Doc, rules.YAML)
				if err == nil {
					err = eng.LoadRuleSet(set)
				}
				if err != nil {
					rep.Refused, rep.Err = cur.Version, err.Error()
				} else {
					applied.Store(cur.Version)
					rep.Version = cur.Version
				}
				_ = rs.Report(ctx, app, rep, time.Minute)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	s := &sampler{eng: eng, app: app, instance: id, now: time.Now, out: tel, keep: 300, version: applied.Load}
	go func() {
		defer wg.Done()
		s.run(ctx, eng.Clock())
	}()
	return wg.Wait
}
