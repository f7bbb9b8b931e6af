package flow

import (
	"math"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
)

// Gate is the flow check of a resource whose only rule is a QPS reject
// rule over one second that counts in the resource's own window (the
// commonest rule set). It is two words, which the engine keeps beside the
// resource's name, so that such a call reads neither the rule set nor the
// controller: the gate makes the rule's decision (admit) on the node the
// caller already has in hand, and explains a refusal with the rule's own
// refusal.
//
// Its zero value decides nothing. Check is safe for concurrent use with
// itself and with Set; Set calls must not overlap.
type Gate struct {
	// limit is the threshold of the lone rule, as float64 bits, or 0 when
	// the gate is closed (a threshold is positive, so its bits are not 0).
	limit atomic.Uint64
	// rule is the lone rule's checker, for its refusals.
	rule atomic.Pointer[reject]
}

// secondWidth is the bucket width of a one-second window, the node's.
const secondWidth = int64(window.BucketWidth)

// Set opens the gate when cs, the flow controllers in force on the resource
// whose node is n, are a single QPS reject rule over one second counting in
// n's own window, without PriorityWait, and only says the resource has no other rules; it closes
// it otherwise. The caller publishes the rule set before calling Set: a
// call that finds the gate closed reads the rule set, and either way it is
// checked against one version of the rules, the old or the new.
func (g *Gate) Set(cs []Controller, only bool, n *window.Node) {
	if only && len(cs) == 1 {
		if r, ok := cs[0].c.(*reject); ok && r.win == n.OwnWindow() && r.width == secondWidth && r.rule.PriorityWait == 0 {
			g.rule.Store(r)
			g.limit.Store(math.Float64bits(r.limit))
			return
		}
	}
	g.limit.Store(0)
	g.rule.Store(nil)
}

// Open reports whether the gate decides on its own (see Set).
func (g *Gate) Open() bool { return g.limit.Load() != 0 }

// Check decides on ec when the gate is open, taking its batch from n's own
// window with the lone rule's decision: it returns decided and the
// refusal, or nil. When it has not decided (the gate is closed, or a rule
// load replaced the rule during the call) the caller must run the
// resource's checks.
func (g *Gate) Check(ec *entry.Context, n *window.Node) (be *core.BlockError, decided bool) {
	limit := g.limit.Load()
	if limit == 0 {
		return nil, false
	}
	ok, seen := admit(ec, n.OwnWindow(), secondWidth, math.Float64frombits(limit))
	if !ok {
		return g.refusal(ec, limit, seen)
	}
	if ec.WantBudget {
		if r := g.rule.Load(); r != nil {
			r.noteWindow(ec, n.OwnWindow(), secondWidth, math.Float64frombits(limit), seen)
		}
	}
	ec.AddUndo((*gateTicket)(n))
	return nil, true
}

// refusal explains the gate's refusal of ec, which found seen admitted
// against limit, with the rule's own refusal, unless the rule in force is
// no longer the one whose limit the check used.
func (g *Gate) refusal(ec *entry.Context, limit, seen uint64) (*core.BlockError, bool) {
	r := g.rule.Load()
	if r == nil || math.Float64bits(r.limit) != limit {
		return nil, false
	}
	return r.refusal(ec, seen), true
}

// gateTicket is the undo ticket of a Gate admission: the node whose own
// window the batch was taken from.
type gateTicket window.Node

func (t *gateTicket) Release(x entry.ExitInfo) {
	giveBack((*window.Node)(t).OwnWindow(), secondWidth, x)
}
