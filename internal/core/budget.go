package core

import "time"

// Budget is what is left of the tightest rate rule that decided an entry,
// at the instant of the decision: the entry asks for it with
// sluice.WithBudget, and the engine fills it whether the entry passes or
// is refused. "Limit requests per Window" is the rule's policy as a client
// sees it; Remaining is how many more requests (batches of one) would pass
// at that instant if nothing else came; Reset is how long until Remaining
// is back to Limit if nothing else comes. What each means for each rate
// strategy is in docs/rules.md ("Remaining budget").
//
// The tightest rule is the one with the least Remaining relative to its
// Limit (ties: the smaller Remaining, then the longer Reset). On a refusal
// by a rate rule, the Budget is that rule's. Rules that do not limit a
// rate (concurrency, circuit breakers, system protection, custom slots)
// leave it alone; the zero Budget (Limit 0) means no rate rule decided the
// entry. A cluster rule tells what this instance knows: Remaining counts
// only the permits it holds itself, not the fleet's.
type Budget struct {
	// Limit is the most requests the rule admits at once (its policy's
	// quota): the threshold of a window rule, the bucket of a token-bucket
	// rule, the queue of a pacing rule.
	Limit float64
	// Remaining is the requests that would still pass at the decision's
	// instant (after the entry, when it passed); never below zero.
	Remaining int64
	// Reset is how long until Remaining is back to Limit if nothing else
	// is admitted.
	Reset time.Duration
	// Window is the span over which Limit refills: the rule's StatInterval
	// for a window rule, the time to refill the whole bucket or queue for
	// the others.
	Window time.Duration
	// Rule names the rule.
	Rule RuleRef
}
