package sluice

import (
	"fmt"
	"reflect"

	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
)

// WithMaxRules bounds the number of rules of one kind (flow,
// system, circuit breaker, param) the engine takes: a load of more is
// refused whole, with an error naming the limit and this option. Zero or
// less means rules.DefaultMaxRules (10,000). Rules cost memory through the
// resources they name (see docs/limits.md for the figures): the engine also
// refuses rules that name more distinct resources, of all kinds together,
// than WithMaxResources allows.
func WithMaxRules(n int) Option { return func(cf *config) { cf.maxRules = n } }

// WithMaxNameBytes bounds the length, in bytes, of a resource name: Entry
// refuses a longer one (ErrBadResource), and a rule load refuses a rule
// holding a longer string (its resource, associated resource, ID,
// attachment key or an exception's value). Zero or less means
// rules.DefaultMaxNameBytes (1 KiB).
func WithMaxNameBytes(n int) Option { return func(cf *config) { cf.maxNameBytes = n } }

// checkLimits refuses rules rs of kind k that the engine's limits do not
// allow: more rules than WithMaxRules, or a string longer than
// WithMaxNameBytes. The error is an *rules.Error.
func checkLimits[R, C any](eng *Engine, k *ruleKind[R, C], rs []R) error {
	if len(rs) > eng.maxRules {
		return &rules.Error{Kind: k.name, Index: -1, Reason: fmt.Sprintf(
			"%d rules, more than the engine's limit of %d rules of one kind; raise it with sluice.WithMaxRules",
			len(rs), eng.maxRules)}
	}
	for i := range rs {
		v := reflect.ValueOf(&rs[i]).Elem()
		err := rulewalk.Strings(v, func(field, s string, key bool) error {
			if len(s) <= eng.maxName {
				return nil
			}
			what := "is"
			if key {
				what = "has a key of"
			}
			res := ""
			if f := v.FieldByName("Resource"); f.IsValid() && f.Kind() == reflect.String {
				res = f.String()
			}
			return &rules.Error{Kind: k.name, Index: i, Resource: res, Field: field, Reason: fmt.Sprintf(
				"%s %d bytes, more than the engine's limit of %d; raise it with sluice.WithMaxNameBytes",
				what, len(s), eng.maxName)}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// resourceNames adds to names the resources rules rs name (their Resource
// and RefResource fields).
func resourceNames[R any](rs []R, names map[string]bool) {
	for i := range rs {
		v := reflect.ValueOf(&rs[i]).Elem()
		for _, f := range [...]string{"Resource", "RefResource"} {
			if fv := v.FieldByName(f); fv.IsValid() && fv.Kind() == reflect.String && fv.String() != "" {
				names[fv.String()] = true
			}
		}
	}
}

// checkResources refuses a rule set that names more distinct resources than
// the engine tracks (WithMaxResources). Must hold eng.mu.
func (eng *Engine) checkResources(set *rules.Set) error {
	names := map[string]bool{}
	resourceNames(set.Flow, names)
	resourceNames(set.CircuitBreaker, names)
	resourceNames(set.Param, names)
	if len(names) > eng.reg.max {
		return fmt.Errorf("sluice: the rules name %d resources, more than the engine's limit of %d; "+
			"raise it with sluice.WithMaxResources", len(names), eng.reg.max)
	}
	return nil
}
