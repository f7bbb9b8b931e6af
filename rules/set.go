package rules

import (
	"cmp"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/rulewalk"
)

// Set is a complete set of rules of every kind, as written in a rule file
// (the file keys are the tags). A kind with no rules is nil. Decode fills
// it, Encode writes it, and the engine's LoadRules loads it whole.
type Set struct {
	Flow           []Flow           `json:"flow,omitempty" yaml:"flow,omitempty"`
	System         []System         `json:"system,omitempty" yaml:"system,omitempty"`
	CircuitBreaker []CircuitBreaker `json:"circuitBreaker,omitempty" yaml:"circuitBreaker,omitempty"`
	Param          []Param          `json:"param,omitempty" yaml:"param,omitempty"`
	Authority      []Authority      `json:"authority,omitempty" yaml:"authority,omitempty"`
}

// Validate returns the first problem with a rule of s, in the order flow,
// system, circuit breaker, param, authority, as an *Error, or nil. Besides each rule's
// fields, it refuses strings that are not valid UTF-8, and duplicates (two
// rules of a kind that count the same thing the same way), reported at the
// later rule with Field empty.
func (s *Set) Validate() error {
	type flowKey struct {
		resource, ref            string
		metric                   FlowMetric
		warmUp, bucket, throttle bool
		interval                 time.Duration
		quota                    Quota
		caller                   string
	}
	type breakerKey struct {
		resource string
		strategy BreakerStrategy
	}
	type paramKey struct {
		resource, attachment string
		index                int
		metric               FlowMetric
		window               time.Duration
		quota                Quota
	}
	return cmp.Or(
		validateList("flow", s.Flow, (*Flow).validate, func(r *Flow) flowKey {
			return flowKey{r.Resource, r.RefResource, cmp.Or(r.Metric, QPS), r.WarmUp != nil, r.Bucket != nil,
				r.Throttle != nil, r.interval(), quotaKey(r.Quota), r.Caller}
		}, "resource, metric, sections (warmUp, bucket, throttle), statInterval, refResource, caller and quota"),
		validateList("system", s.System, (*System).validate, func(r *System) SystemMetric { return r.Metric },
			"metric (the process takes one system rule per metric)"),
		validateList("circuit breaker", s.CircuitBreaker, (*CircuitBreaker).validate, func(r *CircuitBreaker) breakerKey {
			return breakerKey{r.Resource, cmp.Or(r.Strategy, SlowRequestRatio)}
		}, "resource and strategy (a resource takes one breaker per strategy)"),
		validateList("param", s.Param, (*Param).validate, func(r *Param) paramKey {
			return paramKey{r.Resource, r.Key, r.Index, cmp.Or(r.Metric, QPS), r.window(), quotaKey(r.Quota)}
		}, "resource, argument (key or index), metric and duration"),
		validateList("authority", s.Authority, (*Authority).validate, func(r *Authority) string { return r.Resource },
			"resource (a resource takes one authority rule)"),
	)
}

// validateList validates each rule of rs, then refuses it if its key equals
// an earlier rule's, naming the earlier rule and what the key holds (same).
func validateList[R any, K comparable](
	kind string, rs []R, validate func(*R) error, key func(*R) K, same string,
) error {
	seen := make(map[K]int, len(rs))
	for i := range rs {
		r := &rs[i]
		err := validate(r)
		if err == nil {
			err = rulewalk.Strings(reflect.ValueOf(r).Elem(), func(field, s string, key bool) error {
				if utf8.ValidString(s) {
					return nil
				}
				return fieldErr(kind, resourceOf(reflect.ValueOf(r).Elem()), field,
					"%s%q is not valid UTF-8, which no rule document can hold", map[bool]string{true: "key "}[key], clip(s, 40))
			})
		}
		if err != nil {
			err.(*Error).Kind, err.(*Error).Index = kind, i
			return err
		}
		if j, ok := seen[key(r)]; ok {
			return &Error{Kind: kind, Index: i, Resource: resourceOf(reflect.ValueOf(r).Elem()),
				Reason: fmt.Sprintf("duplicates rule %d: both have the same %s; keep one", j, same)}
		}
		seen[key(r)] = i
	}
	return nil
}

// resourceOf returns the Resource field of rule v, or "".
func resourceOf(v reflect.Value) string {
	if f := v.FieldByName("Resource"); f.IsValid() {
		return f.String()
	}
	return ""
}
