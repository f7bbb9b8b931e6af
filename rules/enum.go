package rules

import (
	"fmt"
	"slices"
	"strings"
)

// The enumerations are strings: a rule file writes the constant's value,
// and the zero value "" means the default the field documents (System.Metric
// has none and must be set). Validate refuses any other value, naming the
// rule and the field.

// FlowMetric is what a flow or param rule counts. "" means QPS.
type FlowMetric string

const (
	// QPS counts requests admitted per statistic interval.
	QPS FlowMetric = "qps"
	// Concurrency counts requests in flight.
	Concurrency FlowMetric = "concurrency"
)

// TokenStrategy is how a flow rule computes the number of requests allowed.
// "" means Direct.
type TokenStrategy string

const (
	// Direct allows Threshold per interval from the start.
	Direct TokenStrategy = "direct"
	// WarmUp starts a cold resource at Threshold/ColdFactor and raises the
	// allowance to Threshold over WarmUpPeriod (Guava's SmoothWarmingUp, as
	// in Sentinel).
	WarmUp TokenStrategy = "warm-up"
	// TokenBucket refills Threshold tokens per StatInterval, continuously,
	// and stores at most Burst of them (golang.org/x/time/rate's semantics,
	// as cluster.TokenBucket; not Guava's SmoothBursty, which starts empty
	// and makes the next request pay for the current one): a resource idle
	// long enough admits Burst requests at once, then Threshold per
	// interval. A bucket starts full.
	TokenBucket TokenStrategy = "token-bucket"
)

// ControlBehavior is what a flow or param rule does with a request over the
// limit. "" means Reject.
type ControlBehavior string

const (
	// Reject refuses requests over the limit at once.
	Reject ControlBehavior = "reject"
	// Throttle paces requests evenly at the threshold rate, queueing each
	// for at most MaxQueueing. With the TokenBucket strategy a request
	// instead takes stored tokens and, when there are too few, tokens
	// still to come, waiting for them at most MaxQueueing
	// (rate.Limiter.ReserveN).
	Throttle ControlBehavior = "throttle"
)

// BreakerStrategy is what a circuit breaker counts as a bad outcome and how
// it compares the count with its threshold. "" means SlowRequestRatio.
type BreakerStrategy string

const (
	// SlowRequestRatio counts requests whose response time exceeds
	// MaxAllowedRT and opens when their share of the requests in the window
	// exceeds Threshold.
	SlowRequestRatio BreakerStrategy = "slow-request-ratio"
	// ErrorRatio counts requests that ended with an error (as classified by
	// the engine) and opens when their share exceeds Threshold.
	ErrorRatio BreakerStrategy = "error-ratio"
	// ErrorCount counts requests that ended with an error and opens when
	// their number in the window reaches Threshold.
	ErrorCount BreakerStrategy = "error-count"
)

// SystemMetric is what a system rule measures. It has no default.
type SystemMetric string

const (
	// InboundQPS is the number of inbound requests admitted over the last
	// second (the global inbound node's pass count). A rule admits at most
	// Threshold per second.
	InboundQPS SystemMetric = "qps"
	// InboundConcurrency is the number of inbound requests in flight. A rule
	// admits at most Threshold at once.
	InboundConcurrency SystemMetric = "concurrency"
	// InboundAvgRT is the mean response time of the inbound requests that
	// completed over the last second, in milliseconds. A rule refuses entries
	// while it is over Threshold.
	InboundAvgRT SystemMetric = "avg-rt"
	// Load1 is the host's one-minute load average, as sampled.
	Load1 SystemMetric = "load1"
	// CPUUsage is the process's CPU usage, as sampled: a ratio in [0, 1] of
	// the CPU it may use (its cgroup CPU quota when one applies, otherwise
	// all CPUs of the host).
	CPUUsage SystemMetric = "cpu-usage"
)

// SystemStrategy is how a system rule decides once its metric is over the
// threshold. "" means PlainThreshold.
type SystemStrategy string

const (
	// PlainThreshold refuses every inbound entry while the metric is over
	// the threshold.
	PlainThreshold SystemStrategy = "threshold"
	// BBR refuses inbound entries while the metric is over the threshold
	// and the inbound concurrency exceeds what the process has shown it can
	// complete (maxCompletedPerSecond × minRT).
	BBR SystemStrategy = "bbr"
)

// ClusterMode is how a cluster rule's Threshold counts. "" means
// ClusterTotal.
type ClusterMode string

const (
	// ClusterTotal makes Threshold the fleet's total per StatInterval.
	ClusterTotal ClusterMode = "total"
	// ClusterPerInstance makes Threshold a per-instance figure: the shared
	// budget is Threshold times the number of live instances, following
	// the fleet as instances come and go.
	ClusterPerInstance ClusterMode = "per-instance"
)

// ClusterFallback is what a cluster rule does while its store fails. ""
// means FallbackLocal.
type ClusterFallback string

const (
	// FallbackLocal enforces a local share of the threshold in this
	// instance: LocalThreshold, or Threshold divided by the live instances.
	FallbackLocal ClusterFallback = "local"
	// FallbackPass admits every request.
	FallbackPass ClusterFallback = "pass"
	// FallbackBlock refuses every request.
	FallbackBlock ClusterFallback = "block"
)

// or returns v, or def when v is "" (the field's default).
func or[E ~string](v, def E) E {
	if v == "" {
		return def
	}
	return v
}

// checkEnum refuses a value of field that is not one of names, nor "" when
// the field is optional.
func checkEnum[E ~string](kind, resource, field string, v E, optional bool, names ...E) error {
	if (v == "" && optional) || (v != "" && slices.Contains(names, v)) {
		return nil
	}
	list := fmt.Sprint(names)
	list = strings.ReplaceAll(list[1:len(list)-1], " ", ", ")
	if v == "" {
		return fieldErr(kind, resource, field, "must be set (one of %s)", list)
	}
	return fieldErr(kind, resource, field, "unknown value %q (want one of %s)", clip(string(v), 40), list)
}
