// Package degrade is the circuit-breaker slot: one Breaker per
// rules.CircuitBreaker, each cutting its resource off while recent calls are
// too slow or fail too often, and probing it back to health.
//
// # States
//
// A breaker is Closed, Open or HalfOpen.
//
//   - Closed lets every call through and counts the outcomes of those that
//     exit (response time, and the error given to SetError as judged by the
//     engine's error classifier) on a sliding window of the rule's
//     StatInterval. An exit after which the window holds at least
//     MinRequestAmount calls and crosses the strategy's threshold opens it.
//   - Open refuses every call with a *core.BlockError of type
//     core.BlockDegrade until RetryTimeout has passed since it opened.
//   - The first call after that turns it HalfOpen and is its first probe.
//     HalfOpen admits exactly Probes calls (N) at once, counted with a
//     compare-and-swap on one word, so any number of concurrent callers
//     yields exactly N probes. When all N have exited successfully the
//     breaker closes with an empty window; the first probe that fails (an
//     error, a slow call for the slow-request-ratio strategy, or a call that
//     took StatInterval or longer) opens it for another full RetryTimeout.
//
// A probe refused later in the chain (its ticket released with Blocked) gives
// its slot back. A probe that never exits does not wedge the breaker: once
// all N slots are taken and StatInterval has passed since the last probe was
// admitted, the next Check counts the probes still out as failed and opens
// the breaker again. Exits of probes from a half-open round that has ended
// are ignored.
//
// # Tickets and costs
//
// Every state lives in an immutable phase value behind one atomic pointer.
// A call admitted while Closed holds the ticket of its closed phase, and
// counts only if it exits while that phase lasts; a probe holds the probe
// ticket of its half-open round. Both are made once, with their phase. Neither path allocates: the closed-state check
// is one atomic load, and its exit one window add, plus, only when the
// window holds a bad call, a second add and two window sums.
// Phases (and the fresh window of a new Closed phase) are allocated only at
// transitions.
//
// # Transitions and listeners
//
// Transitions of the breakers built with one Hub are made under the Hub's
// mutex and queued in the order they happen; listeners receive them after
// the mutex is released, one at a time, in that order, each exactly once. A
// listener may call back into the engine (Entry, rule loading): the
// transitions it causes are queued and delivered after it returns, by the
// same goroutine. Listeners therefore run on whichever goroutine made or was
// draining a transition, usually one inside Entry or Exit.
package degrade
