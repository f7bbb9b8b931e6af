package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// Follow makes eng the instance id of app until ctx ends: it loads each
// new version of app's rules from rs (told by Watch, and polling Current
// every poll in case a notification is lost), reports what it runs or
// refused, and publishes a frame to tel each second of eng's clock. wait
// waits for its goroutines after ctx ends.
func Follow(ctx context.Context, eng *sluice.Engine, rs cluster.RuleStore, tel cluster.Telemetry, app, id string, poll time.Duration) (wait func()) {
	var wg sync.WaitGroup
	var applied atomic.Int64
	kick := make(chan struct{}, 1)
	wg.Add(3)
	go func() {
		defer wg.Done()
		_ = rs.Watch(ctx, app, func(int64) {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
	}()
	go func() {
		defer wg.Done()
		var seen int64
		for {
			if cur, err := rs.Current(ctx, app); err == nil && cur.Version != seen {
				seen = cur.Version
				rep := cluster.RuleReport{Instance: id, Version: applied.Load(), At: time.Now()}
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
			t := time.NewTimer(poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-kick:
				t.Stop()
			case <-t.C:
			}
		}
	}()
	s := &Sampler{Engine: eng, App: app, Instance: id, Now: time.Now, Out: tel, Keep: 300, Version: applied.Load}
	go func() {
		defer wg.Done()
		s.Run(ctx, eng.Clock())
	}()
	return wg.Wait
}
