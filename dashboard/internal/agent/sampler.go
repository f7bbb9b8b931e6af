// Package agent takes the frames of an engine of the dashboard's own
// process, which was built without sluice.WithTelemetry (the dashboard's
// local mode): a Sampler takes a cluster.Frame of the engine each second.
package agent

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/stat"
)

// MaxResources bounds the resources of a frame: the busiest ones.
const MaxResources = 50

// Sampler takes a frame of an engine each second and publishes it. Set
// the exported fields before the first call; it is safe for concurrent
// use.
type Sampler struct {
	// Engine is sampled; App and Instance name it in the frames.
	Engine        *sluice.Engine
	App, Instance string
	// Now is the wall clock (frames carry Unix seconds).
	Now func() time.Time
	// Version returns the rule version the engine runs.
	Version func() int64
	// Out receives the frames, each kept for Keep seconds.
	Out  cluster.Telemetry
	Keep int

	mu   sync.Mutex
	prev map[string][stat.BlockTypes]uint64 // BlockedBy totals at the last frame
	last int64                              // the second of the last frame
}

// frame takes the frame of the last completed second, false when it was
// taken already.
func (s *Sampler) frame() (cluster.Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.Now().Unix() - 1
	if sec <= s.last {
		return cluster.Frame{}, false
	}
	s.last = sec
	f := cluster.Frame{App: s.App, Instance: s.Instance, Second: sec, RuleVersion: s.Version(),
		System: s.Engine.SystemMetrics()}
	if st, ok := s.Engine.ClusterStatus(); ok {
		f.ClusterMode = st.Mode.String()
	}
	next := make(map[string][stat.BlockTypes]uint64, len(s.prev))
	s.Engine.Each(func(name string, snap stat.Snapshot) {
		next[name] = snap.BlockedBy
		rs := cluster.ResourceSecond{Resource: name, Concurrency: snap.Concurrency}
		if h := s.Engine.History(name, time.Second); len(h) > 0 {
			rs.Second = h[len(h)-1]
		}
		rs.BlockedBy = apportion(rs.Block, snap.BlockedBy, s.prev[name])
		if rs.BlockedBy[core.BlockSystem] > 0 {
			f.Shedding = true
		}
		if rs.Pass+rs.Block+rs.Complete > 0 || rs.Concurrency > 0 {
			f.Resources = append(f.Resources, rs)
		}
	})
	s.prev = next
	sort.Slice(f.Resources, func(i, j int) bool {
		a, b := f.Resources[i], f.Resources[j]
		if a.Pass+a.Block != b.Pass+b.Block {
			return a.Pass+a.Block > b.Pass+b.Block
		}
		return a.Resource < b.Resource
	})
	if len(f.Resources) > MaxResources {
		f.Resources = f.Resources[:MaxResources]
	}
	for _, b := range s.Engine.CircuitBreakerStates() {
		f.Breakers = append(f.Breakers, cluster.BreakerFrame{Resource: b.Rule.Resource, State: b.State})
	}
	return f, true
}

// Publish takes the frame of the last completed second and publishes it,
// unless it did already.
func (s *Sampler) Publish(ctx context.Context) {
	if f, ok := s.frame(); ok {
		_ = s.Out.Publish(ctx, f, s.Keep, time.Duration(s.Keep)*time.Second)
	}
}

// Run publishes a frame each second of clock until ctx ends.
func (s *Sampler) Run(ctx context.Context, clock sluice.Clock) {
	for {
		t := clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			s.Publish(ctx)
		}
	}
}

// apportion splits block, the refusals of one second, by the reasons of the
// refusals counted between two snapshots' BlockedBy totals (the sampling
// interval is not the engine's second), so that the reasons add up to
// block. Without an earlier snapshot the totals since the resource was made
// give the mix.
func apportion(block uint64, now, prev [stat.BlockTypes]uint64) (out [stat.BlockTypes]uint64) {
	var d [stat.BlockTypes]uint64
	var sum uint64
	for i := range now {
		if now[i] > prev[i] {
			d[i] = now[i] - prev[i]
		}
		sum += d[i]
	}
	if block == 0 || sum == 0 {
		return out
	}
	var given uint64
	top := 0
	for i := range d {
		out[i] = uint64(float64(block) * float64(d[i]) / float64(sum))
		given += out[i]
		if d[i] > d[top] {
			top = i
		}
	}
	out[top] += block - given // rounding, to the main reason
	return out
}
