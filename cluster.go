package sluice

import (
	"context"
	"errors"
	"github.com/sluice-go/sluice/internal/core"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/param"
	"github.com/sluice-go/sluice/rules"
)

// ClusterConfig configures the engine's cluster store (WithCluster). Only
// App is required.
type ClusterConfig struct {
	// App names the application: the instances that share budgets run
	// under one App, which scopes the budgets' keys in the store and
	// counts the live instances. Required.
	App string
	// InstanceID identifies this instance among the live ones of App, in
	// heartbeats (Engine.InstanceID; package fleet names the instance so
	// too unless told otherwise). Empty means the host name, the process
	// ID and a random suffix.
	InstanceID string
	// Timeout bounds every store call and every entry's wait for one: an
	// entry whose decision the store has not given within Timeout is
	// decided by its rule's fallback. Zero means 250 ms. Each call's own
	// deadline follows the store's latency: four times the second slowest
	// of the last 32 successful calls, at least a quarter of Timeout and
	// 20 ms, at most Timeout. A late call's entries are decided by their
	// rules' fallbacks (a local share less this instance's recent use of
	// the store); the engine switches to fallback decisions after three
	// late calls in a row, or at once when a call fails otherwise (a
	// refused or broken connection, an error reply). A late call counts
	// as a sample of its deadline, so a store that became slower is
	// given more time from the third late call on. A probe of a failing
	// store may take four times Timeout (no entry waits for it; a new
	// connection costs several round trips). Set the Redis client's read
	// and write timeouts above Timeout.
	Timeout time.Duration
	// ProbeInterval is the least time between two probes of a failing
	// store; the first successful probe returns to remote decisions. Zero
	// means one second.
	ProbeInterval time.Duration
	// HeartbeatInterval is the time between two heartbeats, which record
	// the instance as alive (for three intervals) and count the live
	// instances (local fallback shares and lease sizes depend on it). Zero
	// means one second.
	HeartbeatInterval time.Duration
	// ExpectedInstances is the number of instances local fallback shares
	// divide the limit by until this instance has counted the fleet:
	// before its first heartbeat succeeds (the store was down when it
	// started) and for two heartbeat lifetimes after that (the others
	// may have started meanwhile and not beaten yet). Zero means 10: an
	// instance that cannot count its peers assumes ten rather than one,
	// so that instances started while the store is down do not each admit
	// the whole limit (see docs/design/cluster.md, "Instances that start while
	// the store is down"). Set it to the fleet's usual size.
	ExpectedInstances int
}

// ClusterStatus is the state of an engine's cluster store, as
// Engine.ClusterStatus reports it. Counts are since the engine was made.
type ClusterStatus struct {
	// Fallback is set while the store has failed or not answered in time:
	// each rule's fallback decides, without touching the store, until a
	// probe succeeds. Otherwise the store decides, through leases of
	// permits (or one request per entry for strict rules). Each change is
	// on the event stream (stat.EventClusterFallback and
	// stat.EventClusterRecovered, see Engine.Subscribe).
	Fallback bool
	// Err is, while Fallback, the store's failure that keeps the engine
	// there: that of the call that switched it, or of the last probe if
	// it failed otherwise since (a Redis that restarted, EOF, and now
	// refuses the password, WRONGPASS); nil otherwise. Each change of its
	// kind is on the event stream too (stat.EventClusterFallback).
	Err error
	// Live is the number of live instances of the App that local
	// fallback shares divide by, this one included, and LiveSource where
	// it comes from: "counted" (the heartbeats' count), "held" (the last
	// known count, kept while the store fails and for two heartbeat
	// lifetimes after it answers again with a lower one: a store that
	// restarted counts only the instances that beat since), or
	// "expected" (ExpectedInstances: the fleet has not been counted yet).
	Live       int
	LiveSource string
	// Takes is the number of Take calls (lease refills and strict requests
	// of every rule, batched), TakeErrors how many of them failed, and
	// Requests the requests they carried.
	Takes, TakeErrors, Requests int64
	// Given is the unused permits given back to the store (expired leases,
	// changed or removed rules); Dropped those that could not go back.
	Given, Dropped int64
	// Probes is the number of probes of a failing store.
	Probes int64
	// Late is the number of store calls that passed their deadline, and
	// Paid the permits charged to the store on recovery for what the
	// local shares admitted meanwhile.
	Late, Paid int64
	// HeartbeatFailures is the number of heartbeats that failed.
	HeartbeatFailures int64
}

// WithCluster makes the engine enforce flow and param rules with a cluster
// section (rules.Flow.Cluster, rules.Param.Cluster) as budgets shared
// through store by every instance of cfg.App; see docs/design/cluster.md. The engine starts a heartbeat goroutine at
// New and a store goroutine while there is store work; Close stops both and
// gives unused leased permits back. An engine without WithCluster, or whose
// cfg is invalid (a nil store, an empty App, a negative duration), refuses
// cluster rules at load with an error that says why.
func WithCluster(store cluster.Store, cfg ClusterConfig) Option {
	return func(cf *config) {
		cf.clusterStore = store
		cf.cluster = cfg
	}
}

// clusterState is the engine's side of its cluster store: nil fields
// without WithCluster.
type clusterState struct {
	mgr *lease.Manager
	hb  *lease.Heartbeat
	fl  *flow.Leases
	pr  *param.Remote
	err error // why cluster rules are refused; nil when mgr is set

	sl *lease.SlotPool // fleet-wide concurrency; nil when the store keeps no slots
}

var errNoCluster = errors.New("cluster rules need sluice.WithCluster (the engine has no cluster store)")

// start sets the state up for store (nil without WithCluster) and cfg, for
// the instance id on host; publish receives every change between remote
// and fallback, for the engine's event stream.
func (cs *clusterState) start(store cluster.Store, cfg ClusterConfig, id, host string, clk core.Clock, publish func(fallback bool, err error, live int, source string)) {
	switch {
	case store == nil:
		cs.err = errNoCluster
		return
	case cfg.App == "":
		cs.err = errors.New("sluice.WithCluster: ClusterConfig.App is required")
		return
	case cfg.Timeout < 0 || cfg.ProbeInterval < 0 || cfg.HeartbeatInterval < 0 || cfg.ExpectedInstances < 0:
		cs.err = errors.New("sluice.WithCluster: negative Timeout, ProbeInterval, HeartbeatInterval or ExpectedInstances")
		return
	}
	var mgrp atomic.Pointer[lease.Manager]
	var hbp atomic.Pointer[lease.Heartbeat]
	var slp atomic.Pointer[lease.SlotPool]
	onTr := func(t lease.Transition) {
		var n int
		var src lease.Source
		if m := mgrp.Load(); m != nil {
			n, src = m.Share()
		}
		publish(t.To == lease.Fallback, t.Err, n, src.String())
	}
	mgr, err := lease.New(lease.Config{
		Store: store, Clock: clk, Timeout: cfg.Timeout, ProbeInterval: cfg.ProbeInterval,
		ProbeKey: cfg.App + "/probe", OnTransition: onTr,
		// Re-register before the first remote decision after an outage.
		OnRecover: func(ctx context.Context) {
			if hb := hbp.Load(); hb != nil {
				hb.BeatNow(ctx)
			}
			// Slots held across the outage count again (docs/cluster-limits.md).
			if sl := slp.Load(); sl != nil {
				sl.Reconcile(ctx)
			}
		},
	})
	if err != nil {
		cs.err = err
		return
	}
	mgrp.Store(mgr)
	expected := cfg.ExpectedInstances
	if expected == 0 {
		expected = lease.DefaultExpected
	}
	mgr.SetShare(expected, lease.SourceExpected)
	fl := flow.NewLeases(mgr, cfg.App)
	hb, err := lease.StartHeartbeat(lease.HeartbeatConfig{
		Store: store, Clock: clk, Interval: cfg.HeartbeatInterval, Timeout: cfg.Timeout,
		Member:   cluster.Member{ID: id, App: cfg.App, Host: host, Started: time.Now()},
		Expected: expected,
		OnLive:   fl.SetLive,
		OnShare:  mgr.SetShare,
	})
	if err != nil {
		_ = mgr.Close()
		cs.err = err
		return
	}
	hbp.Store(hb)
	cs.mgr, cs.hb = mgr, hb
	cs.fl = fl
	cs.pr = param.NewRemote(mgr, cfg.App)
	if ss, ok := store.(lease.SlotStore); ok {
		cs.sl = lease.NewSlotPool(mgr, ss, id, cfg.HeartbeatInterval)
		slp.Store(cs.sl)
		fl.SetSlots(cs.sl)
		cs.pr.SetSlots(cs.sl)
	}
}

// leases returns what flow.Build needs for cluster rules; nil without a
// store.
func (cs *clusterState) leases() *flow.Leases { return cs.fl }

// params returns what param.Build needs for cluster rules; nil without a
// store.
func (cs *clusterState) params() *param.Remote { return cs.pr }

// refuses returns the error of the first cluster rule of rs when the engine
// has no usable store, naming why.
func (cs *clusterState) refuses(rs []rules.Flow) error {
	return refuseCluster(cs, "flow", rs, func(r *rules.Flow) (bool, string) { return r.Cluster != nil, r.Resource })
}

// refusesParams is refuses for param rules.
func (cs *clusterState) refusesParams(rs []rules.Param) error {
	return refuseCluster(cs, "param", rs, func(r *rules.Param) (bool, string) { return r.Cluster != nil, r.Resource })
}

func refuseCluster[R any](cs *clusterState, kind string, rs []R, of func(*R) (bool, string)) error {
	if cs.err == nil {
		return nil
	}
	for i := range rs {
		if on, res := of(&rs[i]); on {
			return &rules.Error{Kind: kind, Index: i, Resource: res, Field: "Cluster", Reason: cs.err.Error()}
		}
	}
	return nil
}

// close stops the heartbeat and the Manager, which gives the unused
// permits of every cluster rule back.
func (cs *clusterState) close() {
	if cs.hb != nil {
		cs.hb.Close()
	}
	if cs.sl != nil {
		cs.sl.Close()
	}
	if cs.mgr != nil {
		_ = cs.mgr.Close()
	}
}

// ClusterStatus returns the state of the engine's cluster store, and false
// when the engine has none (no WithCluster, or an invalid ClusterConfig).
// It is safe for concurrent use, also after Close.
func (eng *Engine) ClusterStatus() (ClusterStatus, bool) {
	cs := &eng.cluster
	if cs.mgr == nil {
		return ClusterStatus{}, false
	}
	st := cs.mgr.Stats()
	n, src := cs.mgr.Share()
	return ClusterStatus{
		Fallback: cs.mgr.Mode() == lease.Fallback, Err: cs.mgr.Err(), Live: n, LiveSource: src.String(),
		Takes: st.Takes, TakeErrors: st.TakeErrors, Requests: st.Requests,
		Given: st.Given, Dropped: st.Dropped, Probes: st.Probes, Late: st.Late, Paid: st.Paid,
		HeartbeatFailures: cs.hb.Failures(),
	}, true
}
