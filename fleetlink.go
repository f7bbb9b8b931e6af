package sluice

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/fleetlink"
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/stat"
)

// What package fleet needs of an engine beyond its public methods
// (internal/fleetlink says why).
func init() {
	fleetlink.Resources = func(e any, f *cluster.Frame, now, sec int64, maxRes int) bool {
		eng := e.(*Engine)
		if eng.closed.Load() {
			return false
		}
		eng.frameResources(f, now, sec, maxRes)
		return true
	}
	fleetlink.SetRuleVersion = func(e any, v int64) {
		if hb := e.(*Engine).cluster.hb; hb != nil {
			hb.SetRuleVersion(strconv.FormatInt(v, 10))
		}
	}
	fleetlink.Closed = func(e any) bool { return e.(*Engine).closed.Load() }
	fleetlink.CountCallers = func(e any) { e.(*Engine).refusedCallers.CompareAndSwap(nil, newCallerTally()) }
}

// frameResources fills f.Resources with the figures of engine second sec,
// read at now, of the busiest maxRes resources, and f.Shedding.
func (eng *Engine) frameResources(f *cluster.Frame, now, sec int64, maxRes int) {
	f.Shedding = eng.shed.on.Load()
	// Rank by cheap reads (two window sums and the refusal counters of
	// each resource: no Snapshot, which costs several µs a resource).
	type busy struct {
		r     *resource
		load  uint64
		block [len(stat.Snapshot{}.BlockedBy)]uint64
	}
	eng.reg.mu.Lock()
	all := make([]busy, 0, len(eng.reg.all))
	for _, r := range eng.reg.all {
		all = append(all, busy{r: r})
	}
	eng.reg.mu.Unlock()
	end := (sec+1)*int64(time.Second) - 1 // the second's last instant: Sum covers the second
	for i := range all {
		b := &all[i]
		n := &b.r.node
		b.load = n.Sum(end, window.Pass) + n.Sum(end, window.Block)
		// Refusals by type over the same second as the Block sum (the
		// counters since start, read now, would cover the time between
		// two frames instead, and not add up to the second's total).
		for t := range b.block {
			b.block[t] = n.BlockedInSecond(sec, core.BlockType(t))
		}
	}
	slices.SortFunc(all, func(a, b busy) int {
		if c := cmp.Compare(b.load, a.load); c != 0 {
			return c
		}
		return cmp.Compare(a.r.name, b.r.name)
	})
	all = all[:min(len(all), maxRes)]
	for _, b := range all {
		r := cluster.ResourceSecond{Resource: b.r.name, BlockedBy: b.block, Concurrency: b.r.node.Concurrency()}
		if rs := b.r.rules.Load(); rs != nil {
			r.Tier, _ = flow.Tier(rs.flow)
		}
		if t := eng.refusedCallers.Load(); t != nil && b.block != [len(b.block)]uint64{} {
			r.Callers = t.top(b.r.name, sec)
		}
		if h := b.r.node.History(now, time.Second); len(h) == 1 && h[0].Start == sec*int64(time.Second) {
			r.Second = h[0]
		} else {
			r.Start = sec * int64(time.Second)
			r.AdaptiveLimit = b.r.adaptiveLimit() // no history kept: the limit now
		}
		f.Resources = append(f.Resources, r)
	}
}
