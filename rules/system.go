package rules

import (
	"math"
	"strconv"
)

// System guards the whole process: it refuses inbound entries while Metric
// is over Threshold (with BBR, only while more are in flight than the
// process has shown it completes).
type System struct {
	// ID is an optional label, shown in block errors and logs.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Metric is what the rule measures. Required.
	Metric SystemMetric `json:"metric" yaml:"metric"`
	// Threshold is the trigger value in the metric's unit, positive: a
	// whole number for InboundConcurrency, a ratio in (0, 1] for CPUUsage.
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// Strategy is PlainThreshold (default) or BBR (not for the inbound
	// metrics, which are themselves what BBR weighs).
	Strategy SystemStrategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
	// Shadow puts the rule in shadow mode (see Flow.Shadow).
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
}

// validate reports the first problem with the rule as an *Error, or nil.
func (r *System) validate() error {
	c, t := &check{kind: "system"}, r.Threshold
	enum(c, "Metric", r.Metric, false, InboundQPS, InboundConcurrency, InboundAvgRT, Load1, CPUUsage)
	enum(c, "Strategy", r.Strategy, true, PlainThreshold, BBR)
	c.threshold("Threshold", t)
	c.fail(r.Metric == InboundConcurrency && t != math.Trunc(t), "Threshold",
		"must be a whole number for the concurrency metric, got %v", t)
	// Refused when the passes of the last second plus the batch exceed it:
	// below 1, every inbound request would be.
	c.fail(r.Metric == InboundQPS && t < 1, "Threshold", "%v inbound requests per second would refuse every inbound "+
		"request (the last second's passes plus the entry's batch are compared with it): it must be at least 1", t)
	if r.Metric == CPUUsage && t > 1 && t <= 100 && c.err == nil {
		c.fail(true, "Threshold", "cpu usage is a ratio in (0, 1], got %v; did you mean %s?",
			t, strconv.FormatFloat(t/100, 'g', 4, 64))
	}
	c.fail(r.Metric == CPUUsage && t > 1, "Threshold", "cpu usage is a ratio in (0, 1], got %v", t)
	c.fail(r.Strategy == BBR && r.Metric != Load1 && r.Metric != CPUUsage, "Strategy",
		"bbr applies to the load1 and cpu-usage metrics only, not %s", string(r.Metric))
	return c.err
}
