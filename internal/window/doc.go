// Package stat holds sluice's statistics: LeapArray, a lock-free sliding
// window of time buckets; Node, the per-resource counters (pass, block,
// complete, error, RT sum, min RT, concurrency) in a one-second window for
// checks and a one-minute window for reporting; and system metrics sampled
// off the request path.
//
// All time is passed in as nanoseconds from the engine's monotonic clock
// (core.Clock), so every window can be driven exactly by a test clock.
package window
