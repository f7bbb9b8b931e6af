package rules

import (
	"fmt"
	"slices"
	"strings"
)

// The enumerations are strings: a rule file writes the constant's value,
// and "" means the default the field documents (System.Metric has none).
// Validate refuses any other value, naming the rule and the field.

// FlowMetric is what a flow or param rule counts. "" means QPS.
type FlowMetric string

const (
	QPS         FlowMetric = "qps"         // requests admitted per interval
	Concurrency FlowMetric = "concurrency" // requests in flight
)

// BreakerStrategy is what a circuit breaker counts as a bad outcome. ""
// means SlowRequestRatio.
type BreakerStrategy string

const (
	SlowRequestRatio BreakerStrategy = "slow-request-ratio" // share of calls slower than MaxAllowedRT
	ErrorRatio       BreakerStrategy = "error-ratio"        // share of calls that failed
	ErrorCount       BreakerStrategy = "error-count"        // number of calls that failed
)

// SystemMetric is what a system rule measures. It has no default.
type SystemMetric string

const (
	InboundQPS         SystemMetric = "qps"         // inbound requests admitted over the last second
	InboundConcurrency SystemMetric = "concurrency" // inbound requests in flight
	InboundAvgRT       SystemMetric = "avg-rt"      // mean RT of the last second's inbound requests, in ms
	Load1              SystemMetric = "load1"       // the host's one-minute load average
	CPUUsage           SystemMetric = "cpu-usage"   // CPU use as a share of the process's cgroup quota, or of the host
)

// SystemStrategy is how a system rule decides once its metric is over the
// threshold. "" means PlainThreshold.
type SystemStrategy string

const (
	PlainThreshold SystemStrategy = "threshold" // refuse while the metric is over
	BBR            SystemStrategy = "bbr"       // and the process is past what it completes (see System)
)

// ClusterMode is how a cluster rule's Threshold counts. "" means
// ClusterTotal.
type ClusterMode string

const (
	ClusterTotal       ClusterMode = "total"        // the fleet's total
	ClusterPerInstance ClusterMode = "per-instance" // times the live instances
)

// ClusterFallback is what a cluster rule does while its store fails. ""
// means FallbackLocal.
type ClusterFallback string

const (
	FallbackLocal ClusterFallback = "local" // a local share of the threshold
	FallbackPass  ClusterFallback = "pass"  // admit every request
	FallbackBlock ClusterFallback = "block" // refuse every request
)

// enum refuses a value of field that is not one of names, nor "" when the
// field is optional.
func enum[E ~string](c *check, field string, v E, optional bool, names ...E) {
	if (v == "" && optional) || (v != "" && slices.Contains(names, v)) || c.err != nil {
		return
	}
	list := fmt.Sprint(names)
	list = strings.ReplaceAll(list[1:len(list)-1], " ", ", ")
	c.fail(v == "", field, "must be set (one of %s)", list)
	c.fail(true, field, "unknown value %q (want one of %s)", clip(string(v), 40), list)
}

// TierMetric is what chooses the tier of a flow rule with Tiers, over the
// last second. "" means TierAvgRT.
type TierMetric string

const (
	TierAvgRT      TierMetric = "avg-rt"      // the resource's mean RT, in ms
	TierErrorRatio TierMetric = "error-ratio" // the share of its calls that failed
	TierCPU        TierMetric = "cpu"         // the process's CPU usage, as system rules read it
)
