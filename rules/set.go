package rules

import (
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/rulewalk"
)

// Set is a complete set of rules of every kind, as written in a rule file.
// A kind with no rules is nil. Decode fills it, Encode writes it, and the
// engine's LoadRules loads it whole.
type Set struct {
	// Flow holds the flow rules (file key "flow").
	Flow []Flow `json:"flow,omitempty" yaml:"flow,omitempty"`
	// System holds the system rules (file key "system").
	System []System `json:"system,omitempty" yaml:"system,omitempty"`
	// CircuitBreaker holds the circuit breaker (degrade) rules (file key
	// "circuitBreaker").
	CircuitBreaker []CircuitBreaker `json:"circuitBreaker,omitempty" yaml:"circuitBreaker,omitempty"`
	// Param holds the hot-parameter rules (file key "param").
	Param []Param `json:"param,omitempty" yaml:"param,omitempty"`
}

// kinds lists the rule kinds of a Set in file order: the file key, the name
// used in *Error.Kind, and the Set field (-1 for the file key "isolation",
// whose rules are read as flow rules of the concurrency metric).
var kinds = []struct {
	key, name string
	field     int
}{
	{"flow", "flow", 0},
	{"isolation", "isolation", -1},
	{"system", "system", 1},
	{"circuitBreaker", "circuit breaker", 2},
	{"param", "param", 3},
}

// Len returns the number of rules of all kinds in s.
func (s *Set) Len() int {
	return len(s.Flow) + len(s.System) + len(s.CircuitBreaker) + len(s.Param)
}

// Validate validates the rules of s kind by kind, in the order flow,
// system, circuit breaker, param, with the kind's slice validator
// (validateFlowRules, ...), and returns the first problem, or nil.
func (s *Set) Validate() error {
	for _, err := range []func() error{
		func() error { return validateFlowRules(s.Flow) },
		func() error { return validateSystemRules(s.System) },
		func() error { return validateCircuitBreakerRules(s.CircuitBreaker) },
		func() error { return validateParamRules(s.Param) },
	} {
		if err := err(); err != nil {
			return err
		}
	}
	return nil
}

// The slice validators below are what a loader calls before it puts a list
// of rules of one kind in force. Each validates every rule (its Validate
// method), refuses a rule with a string (a name, an ID, an attachment key,
// an exception's value) that is not valid UTF-8, which no rule document can
// hold (see docs/rules.md), and refuses duplicates: two rules of the list that would count the
// same thing the same way, so that one of them could only shadow the other
// (5/s beside 3/s on the same count is 3/s) or double it (two breakers on
// the same outcomes open together and report every transition twice). Rules
// on one resource that count differently (per second and per minute, QPS and
// concurrency, two different arguments) are not duplicates.
//
// They return the first problem in list order as an *Error with Index set:
// for a duplicate, the later rule's index, with the earlier one named in the
// Reason and Field left empty (the rule as a whole is the problem). They are
// safe for concurrent use and do not modify the list.

// validateFlowRules validates rs as one list of flow rules. Two flow rules
// are duplicates when they have the same Resource, Metric, Strategy,
// Behavior, StatInterval (a zero StatInterval equals one second) and
// RefResource.
func validateFlowRules(rs []Flow) error {
	type key struct {
		resource, ref string
		metric        FlowMetric
		strategy      TokenStrategy
		behavior      ControlBehavior
		interval      time.Duration
	}
	return validateList("flow", rs, (*Flow).Validate,
		func(r *Flow) key {
			return key{r.Resource, r.RefResource, or(r.Metric, QPS), or(r.Strategy, Direct), or(r.Behavior, Reject), r.interval()}
		},
		func(r *Flow) (string, string) {
			what := string(or(r.Metric, QPS))
			if r.RefResource != "" {
				what += fmt.Sprintf(" of %q", r.RefResource)
			}
			if or(r.Metric, QPS) == QPS {
				what += " per " + r.interval().String()
			}
			return r.Resource, fmt.Sprintf("both count %s with strategy %s and behavior %s; keep one, "+
				"or make them differ in metric, strategy, behavior, statInterval or refResource",
				what, or(r.Strategy, Direct), or(r.Behavior, Reject))
		})
}

// validateSystemRules validates rs as one list of system rules. Two system
// rules are duplicates when they have the same Metric, whatever their
// strategies.
func validateSystemRules(rs []System) error {
	return validateList("system", rs, (*System).Validate,
		func(r *System) SystemMetric { return r.Metric },
		func(r *System) (string, string) {
			return "", fmt.Sprintf("both measure %s; the process takes one system rule per metric, keep one", r.Metric)
		})
}

// validateCircuitBreakerRules validates rs as one list of circuit breaker
// rules. Two circuit breakers are duplicates when they have the same
// Resource and Strategy.
func validateCircuitBreakerRules(rs []CircuitBreaker) error {
	type key struct {
		resource string
		strategy BreakerStrategy
	}
	return validateList("circuit breaker", rs, (*CircuitBreaker).Validate,
		func(r *CircuitBreaker) key { return key{r.Resource, or(r.Strategy, SlowRequestRatio)} },
		func(r *CircuitBreaker) (string, string) {
			return r.Resource, fmt.Sprintf("both count %s outcomes; a resource takes one breaker per strategy, keep one", or(r.Strategy, SlowRequestRatio))
		})
}

// validateParamRules validates rs as one list of param rules. Two param
// rules are duplicates when they have the same Resource, count the same
// argument (the same Key, or, with no Key, the same Index) and have the same
// Metric and Duration (zero equals one second).
func validateParamRules(rs []Param) error {
	type key struct {
		resource, attachment string
		index                int
		metric               FlowMetric
		window               time.Duration
	}
	return validateList("param", rs, (*Param).Validate,
		func(r *Param) key { return key{r.Resource, r.Key, r.Index, or(r.Metric, QPS), r.window()} },
		func(r *Param) (string, string) {
			arg := fmt.Sprintf("argument %d", r.Index)
			if r.Key != "" {
				arg = fmt.Sprintf("attachment %q", r.Key)
			}
			what := string(or(r.Metric, QPS))
			if or(r.Metric, QPS) == QPS {
				what += " per " + r.window().String()
			}
			return r.Resource, fmt.Sprintf("both count %s for each value of %s; keep one, "+
				"or make them differ in argument, metric or duration", what, arg)
		})
}

// validateList validates each rule of rs, then refuses it if its key equals
// an earlier rule's; dup returns the rule's resource and says what the two
// rules share and what to do.
func validateList[R any, K comparable](kind string, rs []R, validate func(*R) error, keyOf func(*R) K, dup func(*R) (resource, reason string)) error {
	seen := make(map[K]int, len(rs))
	for i := range rs {
		r := &rs[i]
		if err := validate(r); err != nil {
			return At(err, i)
		}
		if err := checkUTF8(kind, reflect.ValueOf(r).Elem()); err != nil {
			return At(err, i)
		}
		k := keyOf(r)
		if j, ok := seen[k]; ok {
			res, reason := dup(r)
			return &Error{Kind: kind, Index: i, Resource: res, Reason: fmt.Sprintf("duplicates rule %d: %s", j, reason)}
		}
		seen[k] = i
	}
	return nil
}

// checkUTF8 refuses a rule (a struct, v) holding a string, a map key or a
// string in a struct it points to that is not valid UTF-8, naming the
// field. A rule document cannot hold such a string (JSON and YAML are
// text), so a set that held one could not be written and read back.
func checkUTF8(kind string, v reflect.Value) error {
	return rulewalk.Strings(v, func(field, s string, key bool) error {
		if utf8.ValidString(s) {
			return nil
		}
		what := fmt.Sprintf("%q", clip(s))
		if key {
			what = "key " + what
		}
		return fieldErr(kind, resourceOf(v), field, "%s is not valid UTF-8, which no rule document can hold", what)
	})
}

// resourceOf returns the Resource field of rule v, or "".
func resourceOf(v reflect.Value) string {
	if f := v.FieldByName("Resource"); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// checkNames refuses a rule of s holding a string longer than max bytes
// (DecodeLimits.MaxNameBytes), naming the rule, the field and the limit.
func checkNames(s *Set, max int) error {
	sv := reflect.ValueOf(s).Elem()
	for _, k := range kinds {
		if k.field < 0 {
			continue
		}
		list := sv.Field(k.field)
		for i := 0; i < list.Len(); i++ {
			v := list.Index(i)
			err := rulewalk.Strings(v, func(field, s string, key bool) error {
				if len(s) <= max {
					return nil
				}
				what := "is"
				if key {
					what = fmt.Sprintf("has a key %q of", clip(s))
				}
				return &Error{Kind: k.name, Index: i, Resource: resourceOf(v), Field: field, Reason: fmt.Sprintf(
					"%s %d bytes, more than the limit of %d; raise DecodeLimits.MaxNameBytes "+
						"(WithDecodeLimits for a FileSource) to read it", what, len(s), max)}
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}
