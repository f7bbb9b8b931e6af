package rules

import (
	"fmt"
	"strings"
)

// enum gives a uint8-backed enumeration its text form, used by JSON and YAML
// (through encoding.TextMarshaler and TextUnmarshaler).
type enum struct {
	typ   string
	names []string // index = value
}

func (e enum) name(v uint8) string {
	if int(v) < len(e.names) {
		return e.names[v]
	}
	return fmt.Sprintf("%s(%d)", e.typ, v)
}

func (e enum) marshal(v uint8) ([]byte, error) {
	if int(v) >= len(e.names) {
		return nil, fmt.Errorf("rules: invalid %s %d", e.typ, v)
	}
	return []byte(e.names[v]), nil
}

func (e enum) parse(text []byte) (uint8, error) {
	s := strings.ToLower(strings.TrimSpace(string(text)))
	s = strings.NewReplacer("_", "", "-", "", " ", "").Replace(s)
	for i, n := range e.names {
		if strings.ReplaceAll(n, "-", "") == s {
			return uint8(i), nil
		}
	}
	return 0, fmt.Errorf("rules: unknown %s %q (want one of %s)", e.typ, text, strings.Join(e.names, ", "))
}

func (e enum) valid(v uint8) bool { return int(v) < len(e.names) }

// FlowMetric is what a flow rule counts.
type FlowMetric uint8

const (
	// QPS counts requests admitted per statistic interval.
	QPS FlowMetric = iota
	// Concurrency counts requests in flight.
	Concurrency
)

var flowMetricEnum = enum{"flow metric", []string{"qps", "concurrency"}}

func (m FlowMetric) String() string                  { return flowMetricEnum.name(uint8(m)) }
func (m FlowMetric) MarshalText() ([]byte, error)    { return flowMetricEnum.marshal(uint8(m)) }
func (m *FlowMetric) UnmarshalText(b []byte) error   { return parseInto(flowMetricEnum, b, (*uint8)(m)) }
func (s TokenStrategy) String() string               { return tokenStrategyEnum.name(uint8(s)) }
func (s TokenStrategy) MarshalText() ([]byte, error) { return tokenStrategyEnum.marshal(uint8(s)) }
func (s *TokenStrategy) UnmarshalText(b []byte) error {
	return parseInto(tokenStrategyEnum, b, (*uint8)(s))
}
func (c ControlBehavior) String() string               { return controlBehaviorEnum.name(uint8(c)) }
func (c ControlBehavior) MarshalText() ([]byte, error) { return controlBehaviorEnum.marshal(uint8(c)) }
func (c *ControlBehavior) UnmarshalText(b []byte) error {
	return parseInto(controlBehaviorEnum, b, (*uint8)(c))
}

// TokenStrategy is how a flow rule computes the number of requests allowed.
type TokenStrategy uint8

const (
	// Direct allows Threshold per interval from the start.
	Direct TokenStrategy = iota
	// WarmUp starts a cold resource at Threshold/ColdFactor and raises the
	// allowance to Threshold over WarmUpPeriod (Guava's SmoothWarmingUp, as
	// in Sentinel).
	WarmUp
	// TokenBucket refills Threshold tokens per StatInterval, continuously,
	// and stores at most Burst of them (golang.org/x/time/rate's semantics,
	// as cluster.TokenBucket; not Guava's SmoothBursty, which starts empty
	// and makes the next request pay for the current one): a resource idle
	// long enough admits Burst requests at once, then Threshold per
	// interval. A bucket starts full.
	TokenBucket
)

var tokenStrategyEnum = enum{"token strategy", []string{"direct", "warm-up", "token-bucket"}}

// ControlBehavior is what a flow rule does with a request over the limit.
type ControlBehavior uint8

const (
	// Reject refuses requests over the limit at once.
	Reject ControlBehavior = iota
	// Throttle paces requests evenly at the threshold rate, queueing each
	// for at most MaxQueueing. With the TokenBucket strategy a request
	// instead takes stored tokens and, when there are too few, tokens
	// still to come, waiting for them at most MaxQueueing
	// (rate.Limiter.ReserveN).
	Throttle
)

var controlBehaviorEnum = enum{"control behavior", []string{"reject", "throttle"}}

func parseInto(e enum, b []byte, dst *uint8) error {
	v, err := e.parse(b)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}
