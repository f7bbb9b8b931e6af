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
