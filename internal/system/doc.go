// Package system is the system adaptive protection slot: it refuses inbound
// entries while the process as a whole runs hot, whatever resource they are
// for.
//
// The slot checks rules.System rules on five process-wide metrics. Inbound
// QPS, concurrency and average RT come from the engine's global inbound node;
// load1 and CPU usage come from a Sampler that reads a
// Source on its own goroutine. Check never samples: it reads
// cached values (a few atomic loads), so a full set of rules costs a few
// nanoseconds on the request path.
//
// With the BBR strategy a load1 or CPU rule refuses entries only while the
// metric is over its threshold and the inbound concurrency is above what the
// process has shown it can complete:
//
//	concurrency > 1 && concurrency > maxCompletedPerSecond × minRT(s)
//
// which is Little's law (L = λ·W) applied to the best throughput of the last
// second and the shortest response time of the last ten seconds
// (stat.MinRTMemory): work beyond that is queueing, not being served. The
// minimum RT has the longer memory because a sustained overload inflates
// every RT, the shortest included. See docs/design/system-adaptive.md.
//
// The slot owns the sampler: it starts it when rules that need load1 or CPU
// usage are loaded (or on Start) and stops it on Close.
package system
