// Package flow is the flow-control slot: one Controller per flow rule, each
// deciding on the QPS or concurrency of its resource (or of an associated
// resource), rejecting at once or pacing requests through a bounded queue,
// directly, with a Guava-style warm-up or from a token bucket. Each kind of
// rule is a type of its own (reject, exact, throttle, warmUp,
// warmUpThrottle, tokenBucket, tokenBucketThrottle, concurrency, associated)
// behind the Controller value the engine holds.
//
// Admission is exact under concurrency: a QPS controller's check and its
// count are one atomic step on the window's current bucket, and a
// concurrency controller reserves its in-flight slot with a compare-and-swap,
// so concurrent callers never together pass the threshold.
//
// A resource whose only rule is a one-second QPS reject rule counting in
// the resource's own window is admitted through a Gate, one word the engine
// keeps beside the resource's name: the same decision as the rule's
// controller, made without reading the rule set.
package flow
