// Package window holds sluice's sliding windows: LeapArray, a lock-free
// window of time buckets with one counter per metric; Window, a window of
// fixed shape with one counter and a check-and-add, in which flow rules
// count admissions; Node, the per-resource counters (pass, block, complete,
// error, RT sum, min RT, concurrency) in a one-second window for checks and
// a one-minute window for reporting; and the system figures read from the
// engine's inbound node. It is also where sluice decides how request-path
// data sits in memory (layout.go): CacheLine, Pad and Prefetch, which the
// engine's resources use too; and where a node whose calls contend across
// cores spreads its hot counters over stripes (stripe.go).
//
// All time is passed in as nanoseconds from the engine's monotonic clock
// (core.Clock), so every window can be driven exactly by a test clock.
package window
