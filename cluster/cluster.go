// Package cluster is the contract between an engine and a store that
// shares budgets across the instances of a service: "5,000 per second for
// this API in total", "20 posts per hour per user, whichever instance serves
// them".
//
// A Store keeps budgets and hands out permits from them, deciding on its own
// clock (never the instances'), so clock skew between hosts changes no
// decision. The Redis implementation lives in its own module,
// github.com/sluice-go/sluice/cluster/redis, so that programs that do not
// share limits never import a Redis client.
package cluster

import (
	"context"
	"time"
)

// Algorithm is how a budget counts.
type Algorithm uint8

const (
	// TokenBucket refills Limit permits per Interval, continuously, and
	// stores at most Burst of them (golang.org/x/time/rate and Guava's
	// SmoothBursty semantics). A budget starts full.
	TokenBucket Algorithm = iota + 1
	// SlidingWindow admits at most Limit permits in any window of length
	// Interval, with no doubling at the edges of aligned windows.
	SlidingWindow
	// Pacing spaces permits Interval/Limit apart (GCRA). A grant may ask the
	// caller to wait up to MaxQueue before using its first permit.
	Pacing
	// Calendar admits at most Limit permits in the budget's key, whatever
	// the time: a count that never goes down. A calendar quota names one
	// budget per period (the period is part of Key), and the Store lets
	// its key expire Interval after its first grant, the period's length.
	Calendar
)

// String returns "token-bucket", "sliding-window", "pacing" or "calendar".
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token-bucket"
	case SlidingWindow:
		return "sliding-window"
	case Calendar:
		return "calendar"
	case Pacing:
		return "pacing"
	}
	return "unknown"
}

// Budget describes one shared budget. Budgets are identified by Key; the
// other fields are the budget's terms and are sent with every request, so a
// rule change takes effect at the next request without a separate update.
type Budget struct {
	// Key names the budget within the application (for example the rule's
	// resource and, for a param rule, a digest of the value). A Store adds
	// its own prefix and keeps every key of one budget together.
	Key string
	// Algorithm is how the budget counts.
	Algorithm Algorithm
	// Limit is the number of permits per Interval; positive.
	Limit float64
	// Interval is the period Limit is counted over; positive.
	Interval time.Duration
	// Burst is, for TokenBucket, the most permits stored after an idle
	// period. Zero means Limit.
	Burst float64
	// MaxQueue is, for Pacing, the longest wait a grant may carry; a
	// request whose wait would be longer is granted nothing.
	MaxQueue time.Duration
}

// Request asks a budget for permits.
type Request struct {
	Budget Budget
	// N is the number of permits asked for; at least 1.
	N int64
	// Partial accepts fewer than N permits when fewer are available (a
	// lease refill takes what there is); otherwise the grant is N or
	// nothing.
	Partial bool
}

// Grant is a Store's answer to one Request.
type Grant struct {
	// N is the number of permits granted, from 0 to the request's N.
	N int64
	// Wait is, for Pacing, how long the caller must wait before its first
	// permit is due; zero otherwise.
	Wait time.Duration
	// RetryAfter is, when fewer permits were granted than asked for, the
	// Store's estimate of when the rest could be granted if nothing else
	// arrived; zero when it cannot tell.
	RetryAfter time.Duration
}

// Member is one live instance of an application, as its heartbeat records
// it.
type Member struct {
	// ID identifies the instance; unique among the live instances of App.
	ID string
	// App names the application the instance belongs to.
	App string
	// Host is the instance's host name.
	Host string
	// Started is when the instance started.
	Started time.Time
	// RuleVersion is the version of the rules the instance runs; empty when
	// it runs rules of its own.
	RuleVersion string
}

// Store shares budgets across instances. Implementations must be safe for
// concurrent use; each method makes at most one round trip to the store and
// returns when ctx ends, whatever the store does.
type Store interface {
	// Take decides every request of reqs in one round trip and writes the
	// answers to grants, which has the same length. An error means no
	// request was decided (the caller falls back); grants are then
	// undefined.
	Take(ctx context.Context, reqs []Request, grants []Grant) error
	// Give returns n unused permits to budget b (a lease released). A
	// budget never holds more than it could have had: a TokenBucket stays
	// at most Burst, and a SlidingWindow or Pacing budget forgets at most
	// the n most recent permits.
	Give(ctx context.Context, b Budget, n int64) error
	// Beat records m as alive for ttl and returns the number of live
	// members of m.App, m included.
	Beat(ctx context.Context, m Member, ttl time.Duration) (live int, err error)
	// Members returns the live members of app.
	Members(ctx context.Context, app string) ([]Member, error)
}

// Leaver is implemented by a Store whose members can leave the live set
// at once, and whose live count tells members that left from records it
// lost. The engine's heartbeat uses it when its Store has it (the Redis
// Store does): an instance that closes leaves at once, and the others
// count it out at their next beat instead of after its TTL and a hold.
type Leaver interface {
	// Leave removes m from the live members of m.App.
	Leave(ctx context.Context, m Member) error
	// BeatEpoch is Beat that also returns the epoch of m.App's live set:
	// an identifier that stays the same while the Store keeps the set, and
	// changes when the set was lost (a restart without its data, every
	// member expired). Under one epoch a lower count is members that left
	// or expired, which the heartbeat believes at once; across a change
	// it holds the higher count, as it does for a Store without Leaver.
	BeatEpoch(ctx context.Context, m Member, ttl time.Duration) (live int, epoch string, err error)
}
