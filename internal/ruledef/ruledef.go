// Package ruledef holds the defaults and bounds of the rule fields, which
// package rules documents on the fields and validates, and which the
// engine's packages read when a field is zero. They are not part of the
// public API: a user writes zero for a default.
package ruledef

import "time"

const (
	// StatInterval is the statistic interval of a flow rule or circuit
	// breaker whose StatInterval is zero.
	StatInterval = time.Second
	// ColdFactor is the cold factor of a warm-up rule whose ColdFactor is
	// zero.
	ColdFactor = 3.0
	// MinRequestAmount is the minimum request amount of a circuit breaker
	// whose MinRequestAmount is zero (as in Sentinel).
	MinRequestAmount = 5
	// Probes is the number of probes of a circuit breaker whose Probes is
	// zero.
	Probes = 1
	// ParamDuration is the Duration of a param rule whose Duration is zero.
	ParamDuration = time.Second
	// ParamCapacity is the Capacity of a param rule whose Capacity is zero.
	ParamCapacity = 10000

	// MaxExactThreshold bounds the threshold of an exact flow rule, which
	// keeps one admission time (8 bytes) per request it admits per
	// interval.
	MaxExactThreshold = 10000
	// MaxProbes bounds a circuit breaker's Probes.
	MaxProbes = 10000
	// MaxParamCapacity bounds Param.Capacity.
	MaxParamCapacity = 1 << 24
	// MaxParamIndex bounds Param.Index.
	MaxParamIndex = 255
	// MaxParamDuration bounds Param.Duration: 366 days.
	MaxParamDuration = 366 * 24 * time.Hour
	// MaxParamExceptions bounds the number of entries of Param.Exceptions.
	MaxParamExceptions = 1 << 16
)

// AdaptiveDefaults returns the fields of an adaptive concurrency section
// (rules.Adaptive) with the defaults of the zero ones: Min 1, Max 1000 (or
// Min when larger), Initial Min, Window 100ms, Tolerance 0.2, probe
// interval 30s.
func AdaptiveDefaults(lo, hi, initial int64, window time.Duration, tol float64, probe time.Duration) (int64, int64, int64, time.Duration, float64, time.Duration) {
	if lo == 0 {
		lo = 1
	}
	if hi == 0 {
		hi = max(1000, lo)
	}
	if initial == 0 {
		initial = lo
	}
	if window == 0 {
		window = 100 * time.Millisecond
	}
	if tol == 0 {
		tol = 0.2
	}
	if probe == 0 {
		probe = 30 * time.Second
	}
	return lo, hi, initial, window, tol, probe
}
