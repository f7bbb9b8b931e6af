// Package param is the hot-parameter slot: one Controller per param rule,
// limiting a resource per value of one of its arguments (per user, per
// client IP, per API key), with a token bucket, a pacer or an in-flight
// counter for each value.
//
// Per-value state lives in a bounded cache: sharded by the value's hash,
// each shard an open-addressing table under one short mutex with S3-FIFO
// eviction, which keeps frequently used values when a scan of values seen
// once passes through.
// Values with requests in flight are never evicted, so every release reaches
// the live count. A value's whole state is one 64-byte slot of its shard's
// table (one cache line): a value of at most 21 bytes is kept inside it, a
// longer one is tracked by a 128-bit fingerprint, so a rule's memory is
// bounded per value however long the values are. A check on a string or
// integer argument does not allocate once the value is tracked, and the
// arguments never leave the caller's stack. See docs/design/param.md for the
// algorithms and their exact boundaries.
//
// A cluster rule (rules.Param.Cluster) gives each value a budget in the
// engine's cluster store, named by a SHA-256 digest of the value: by
// default every entry asks the store (lease.Manager.Ask, concurrent entries
// sharing one round trip); with Cluster.Leases each value has a
// lease.Limiter, at most Capacity of them. While the store fails, the
// rule's fallback decides, the local share using this package's own
// per-value state. See docs/design/cluster.md.
package param
