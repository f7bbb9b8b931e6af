// Package flow is the flow-control slot: one Controller per flow rule, each
// deciding on the QPS or concurrency of its resource (or of an associated
// resource), rejecting at once or pacing requests through a bounded queue,
// directly or with a Guava-style warm-up.
//
// Admission is exact under concurrency: a QPS controller's check and its
// count are one atomic step on the window's current bucket, and a
// concurrency controller reserves its in-flight slot with a compare-and-swap,
// so concurrent callers never together pass the threshold.
package flow
