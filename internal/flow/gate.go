package flow

import (
	"math"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
)

// Gate is the flow admission of a resource whose only rule is a QPS reject
// rule over one second that counts in the resource's own window (the
// commonest rule set). It is one word, which the engine keeps beside the
// resource's name, so that such a call reads neither the rule set nor the
// controller: it makes the rule's decision (admit) on the node it already
// has in hand.
//
// A Gate only ever admits. When it does not, because the resource has other
// rules or the rule refuses the entry, the caller runs the rule set's
// checks, and the controller decides and explains its refusal (so a refusal
// costs a second, cached, check-and-add).
//
// Its zero value admits nothing on its own. Pass is safe for concurrent use
// with itself and with Set; Set calls must not overlap.
type Gate struct {
	// limit is the threshold of the lone rule, as float64 bits, or 0 when
	// the gate is closed (a threshold is positive, so its bits are not 0).
	limit atomic.Uint64
}

// secondWidth is the bucket width of a one-second window, the node's.
const secondWidth = int64(window.BucketWidth)

// Set opens the gate when cs, the flow controllers in force on the resource
// whose node is n, are a single QPS reject rule over one second counting in
// n's own window and only says the resource has no other rules; it closes
// it otherwise. The caller publishes the rule set before calling Set: a
// call that finds the gate closed reads the rule set, and either way it is
// checked against one version of the rules, the old or the new.
func (g *Gate) Set(cs []Controller, only bool, n *window.Node) {
	var limit uint64
	if only && len(cs) == 1 {
		if r, ok := cs[0].c.(*reject); ok && r.win == n.OwnWindow() && r.width == secondWidth {
			limit = math.Float64bits(r.limit)
		}
	}
	g.limit.Store(limit)
}

// Open reports whether the gate admits on its own (see Set).
func (g *Gate) Open() bool { return g.limit.Load() != 0 }

// Pass admits ec through the gate, taking its batch from n's own window
// with the lone rule's decision, and reports whether it did. False means
// the caller must run the resource's checks, which decide.
func (g *Gate) Pass(ec *entry.Context, n *window.Node) bool {
	limit := g.limit.Load()
	if limit == 0 {
		return false
	}
	ok, _ := admit(ec, n.OwnWindow(), secondWidth, math.Float64frombits(limit), (*gateTicket)(n))
	return ok
}

// gateTicket is the undo ticket of a Gate admission: the node whose own
// window the batch was taken from.
type gateTicket window.Node

func (t *gateTicket) Release(x entry.ExitInfo) {
	giveBack((*window.Node)(t).OwnWindow(), secondWidth, x)
}
