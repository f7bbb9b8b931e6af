package quota

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/rules"
)

// Remote keeps a cluster quota's count in the cluster store: one budget of
// algorithm cluster.Calendar per period (and value), named
// "<stem>/<period's label>", whose key expires a period's length after its
// first grant. Every entry is one all-or-nothing request
// (lease.Manager.Ask); concurrent entries share a round trip.
//
// While the store fails, the rule's fallback decides: pass, block, or a
// local count of LocalThreshold units a period (zero: the quota divided by
// the live instances, rounded up). What the local count of a flow quota
// admitted is charged to the store, in the same period, once it answers
// again (lease.Manager.ChargeAndAsk).
type Remote struct {
	mgr      *lease.Manager
	stem     string
	fallback rules.ClusterFallback
	local    int64

	mu        sync.Mutex
	owed      int64 // units the local count admitted, not charged yet
	owedStart int64 // the period they were admitted in
}

// NewRemote returns the Remote of a quota whose budgets are named from
// stem (the application, kind, resource and calendar), deciding through m
// with the rule's cluster section cl.
func NewRemote(m *lease.Manager, stem string, cl *rules.Cluster) *Remote {
	return &Remote{mgr: m, stem: stem, fallback: cl.Fallback, local: int64(cl.LocalThreshold)}
}

// Budget is the store budget of the period [start, end) of the quota,
// for the value whose key part is sub ("" for a flow quota).
func (r *Remote) Budget(cal *Calendar, sub string, start, end, limit int64) cluster.Budget {
	key := r.stem
	if sub != "" {
		key += "/" + sub
	}
	return cluster.Budget{Key: key + "/" + cal.Label(start), Algorithm: cluster.Calendar, Limit: float64(limit), Interval: time.Duration(end - start)}
}

// Answer is a Remote's decision.
type Answer struct {
	// By is what decided: the store, the fallback, or the caller's context.
	By lease.Decider
	// Admitted reports whether the entry may pass.
	Admitted bool
	// Local is the limit of the local count when it decided (fallback
	// local), else 0.
	Local int64
	// Used is the local count found when it decided.
	Used int64
}

// Ask decides n units of the period holding wall instant t (now is the
// engine clock's reading) for value sub of budget limit; fb is the local
// count the fallback uses. charge, for a flow quota, sends what the local
// count admitted ahead of the request.
func (r *Remote) Ask(ctx context.Context, cal *Calendar, fb *Count, sub string, t, now, n, limit int64, charge bool) Answer {
	start, end := cal.Bounds(t)
	b := r.Budget(cal, sub, start, end, limit)
	var owe int64
	if charge && r.mgr.Mode() == lease.Remote {
		r.mu.Lock()
		if r.owedStart == start {
			owe = r.owed
		}
		r.owed, r.owedStart = 0, 0
		r.mu.Unlock()
	}
	a := r.mgr.ChargeAndAsk(ctx, b, now, n, owe)
	if a.By != lease.ByFallback {
		return Answer{By: a.By, Admitted: a.Admitted}
	}
	if owe > 0 {
		r.addOwed(start, owe) // not charged
	}
	switch r.fallback {
	case rules.FallbackPass:
		return Answer{By: lease.ByFallback, Admitted: true}
	case rules.FallbackBlock:
		return Answer{By: lease.ByFallback}
	}
	lim := r.LocalLimit(limit)
	ok, used, _ := fb.Take(cal, t, n, lim)
	if ok && charge {
		r.addOwed(start, n)
	}
	return Answer{By: lease.ByFallback, Admitted: ok, Local: lim, Used: used}
}

// LocalLimit is the local count's limit for a quota of limit units: the
// rule's LocalThreshold, or limit divided by the instances the Manager
// counts, rounded up.
func (r *Remote) LocalLimit(limit int64) int64 {
	if r.local > 0 {
		return r.local
	}
	n, _ := r.mgr.Share()
	n = max(n, 1)
	return (limit + int64(n) - 1) / int64(n)
}

// AskTable is Ask for a param quota's value key (sub its digest), with the
// per-value local table fb; nothing is charged back.
func (r *Remote) AskTable(ctx context.Context, cal *Calendar, fb *Table, key, sub string, t, now, n, limit int64) (Answer, Outcome) {
	start, end := cal.Bounds(t)
	a := r.mgr.Ask(ctx, r.Budget(cal, sub, start, end, limit), now, n)
	if a.By != lease.ByFallback {
		return Answer{By: a.By, Admitted: a.Admitted}, Taken
	}
	switch r.fallback {
	case rules.FallbackPass:
		return Answer{By: lease.ByFallback, Admitted: true}, Taken
	case rules.FallbackBlock:
		return Answer{By: lease.ByFallback}, Taken
	}
	lim := r.LocalLimit(limit)
	o, used, _ := fb.Take(cal, key, t, n, lim)
	return Answer{By: lease.ByFallback, Admitted: o == Taken, Local: lim, Used: used}, o
}

func (r *Remote) addOwed(start, n int64) {
	r.mu.Lock()
	if r.owedStart != start {
		r.owed, r.owedStart = 0, start
	}
	r.owed += n
	r.mu.Unlock()
}
