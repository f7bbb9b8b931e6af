package rules

import (
	"math"
	"strconv"
	"strings"
)

// System is a system adaptive protection rule: it guards the whole process
// rather than one resource, and applies to inbound traffic only (outbound
// entries are never refused by it).
//
// A rule compares one process-wide Metric with Threshold. With the
// PlainThreshold strategy (the default) every inbound entry is refused while
// the metric is over the threshold. With BBR (Load1 and CPUUsage only) an
// entry is refused only while the metric is over the threshold and, at the
// same time, more inbound requests are in flight than the process has shown it
// can serve:
//
//	concurrency > 1 && concurrency > maxCompletedPerSecond × minRT(seconds)
//
// so a hot process keeps admitting the work it completes and sheds only the
// excess (Little's law; see docs/system-adaptive.md).
//
// The zero value of Strategy is PlainThreshold; Metric and Threshold are
// required.
type System struct {
	// ID is an optional label for the rule, shown in block errors and logs.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Metric is what the rule measures. Required: the zero value is refused.
	Metric SystemMetric `json:"metric" yaml:"metric"`
	// Threshold is the trigger value, in the metric's unit: requests per
	// second for InboundQPS, requests in flight for InboundConcurrency (a
	// whole number), milliseconds for InboundAvgRT, the one-minute load
	// average for Load1, and a ratio in (0, 1] for CPUUsage (0.8 means 80 %
	// of the CPU the process may use). It must be positive.
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// Strategy is PlainThreshold (default) or BBR. BBR is refused for the
	// inbound metrics: QPS, concurrency and RT are themselves the quantities
	// BBR weighs, so a plain threshold is what such a rule means.
	Strategy SystemStrategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
}

// Validate reports the first problem with the rule as an *Error, or nil.
func (r *System) Validate() error {
	const kind = "system"
	if r.Metric == 0 {
		return fieldErr(kind, "", "Metric", "must be set (one of %s)", strings.Join(systemMetricEnum.names, ", "))
	}
	if !r.Metric.valid() {
		return fieldErr(kind, "", "Metric", "unknown metric %d", uint8(r.Metric))
	}
	if !systemStrategyEnum.valid(uint8(r.Strategy)) {
		return fieldErr(kind, "", "Strategy", "unknown strategy %d", uint8(r.Strategy))
	}
	if err := checkThreshold(kind, "", "Threshold", r.Threshold); err != nil {
		return err
	}
	switch r.Metric {
	case InboundConcurrency:
		if r.Threshold != math.Trunc(r.Threshold) {
			return fieldErr(kind, "", "Threshold", "must be a whole number for the concurrency metric, got %v", r.Threshold)
		}
	case InboundQPS:
		// Refused when the passes of the last second plus the batch exceed
		// it: below 1, every inbound request would be.
		if r.Threshold < 1 {
			return fieldErr(kind, "", "Threshold", "%v inbound requests per second would refuse every inbound request (the last second's passes plus the entry's batch are compared with it): it must be at least 1", r.Threshold)
		}
	case CPUUsage:
		if r.Threshold > 1 {
			hint := ""
			if r.Threshold <= 100 {
				hint = "; did you mean " + formatRatio(r.Threshold/100) + "?"
			}
			return fieldErr(kind, "", "Threshold", "cpu usage is a ratio in (0, 1], got %v%s", r.Threshold, hint)
		}
	}
	if r.Strategy == BBR && r.Metric != Load1 && r.Metric != CPUUsage {
		return fieldErr(kind, "", "Strategy", "bbr applies to the load1 and cpu-usage metrics only, not %s", r.Metric)
	}
	return nil
}

func formatRatio(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// SystemMetric is what a system rule measures.
type SystemMetric uint8

const (
	// InboundQPS is the number of inbound requests admitted over the last
	// second (the global inbound node's pass count). A rule admits at most
	// Threshold per second.
	InboundQPS SystemMetric = iota + 1
	// InboundConcurrency is the number of inbound requests in flight. A rule
	// admits at most Threshold at once.
	InboundConcurrency
	// InboundAvgRT is the mean response time of the inbound requests that
	// completed over the last second, in milliseconds. A rule refuses entries
	// while it is over Threshold.
	InboundAvgRT
	// Load1 is the host's one-minute load average, as sampled.
	Load1
	// CPUUsage is the process's CPU usage, as sampled: a ratio in [0, 1] of
	// the CPU it may use (its cgroup CPU quota when one applies, otherwise
	// all CPUs of the host).
	CPUUsage
)

// systemMetricEnum names the metrics; the name of metric v is names[v-1]
// (zero is "unset" and has no name).
var systemMetricEnum = enum{"system metric", []string{"qps", "concurrency", "avg-rt", "load1", "cpu-usage"}}

func (m SystemMetric) valid() bool { return m != 0 && systemMetricEnum.valid(uint8(m)-1) }

// String returns the metric's name ("qps", "concurrency", "avg-rt", "load1",
// "cpu-usage").
func (m SystemMetric) String() string {
	switch {
	case m == 0:
		return "unset"
	case !m.valid():
		return "system metric(" + strconv.Itoa(int(m)) + ")"
	}
	return systemMetricEnum.name(uint8(m) - 1)
}

// MarshalText implements encoding.TextMarshaler.
func (m SystemMetric) MarshalText() ([]byte, error) {
	if m == 0 {
		return systemMetricEnum.marshal(255) // an error naming the type
	}
	return systemMetricEnum.marshal(uint8(m) - 1)
}

// UnmarshalText implements encoding.TextUnmarshaler. Case, dashes,
// underscores and spaces are ignored ("CPU_USAGE" is "cpu-usage").
func (m *SystemMetric) UnmarshalText(b []byte) error {
	v, err := systemMetricEnum.parse(b)
	if err != nil {
		return err
	}
	*m = SystemMetric(v + 1)
	return nil
}

// SystemStrategy is how a system rule decides once its metric is over the
// threshold.
type SystemStrategy uint8

const (
	// PlainThreshold refuses every inbound entry while the metric is over
	// the threshold.
	PlainThreshold SystemStrategy = iota
	// BBR refuses inbound entries while the metric is over the threshold
	// and the inbound concurrency exceeds what the process has shown it can
	// complete (maxCompletedPerSecond × minRT).
	BBR
)

var systemStrategyEnum = enum{"system strategy", []string{"threshold", "bbr"}}

// String returns "threshold" or "bbr".
func (s SystemStrategy) String() string { return systemStrategyEnum.name(uint8(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s SystemStrategy) MarshalText() ([]byte, error) { return systemStrategyEnum.marshal(uint8(s)) }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *SystemStrategy) UnmarshalText(b []byte) error {
	return parseInto(systemStrategyEnum, b, (*uint8)(s))
}
