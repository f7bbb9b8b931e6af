package sluice

import (
	"fmt"
	"reflect"

	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
)

// Limits bounds what an engine takes (WithLimits); a zero field means its
// default. docs/design/limits.md gives what each costs.
type Limits struct {
	// Resources bounds the number of distinct resources the engine keeps
	// statistics for (each costs about 2 KiB, and more once its figures
	// are read: see WithHistory). Entries of further resources without
	// rules are counted together under the resource named
	// "__sluice_overflow__" until idle resources are forgotten (two
	// minutes without entries: see Engine.Snapshot) and make room; a load
	// whose rules, of all kinds together, name more resources is refused.
	// Zero or less means 10,000.
	Resources int
	// Rules bounds the number of rules of one kind (flow, system, circuit
	// breaker, param) the engine takes: a load of more is refused whole,
	// with an error naming the limit. Zero or less means
	// rules.DefaultMaxRules (10,000).
	Rules int
	// NameBytes bounds the length, in bytes, of a resource name: Entry
	// refuses a longer one (ErrBadResource), and a rule load refuses a rule
	// holding a longer string (its resource, associated resource, ID,
	// attachment key or an exception's value). Zero or less means
	// rules.DefaultMaxNameBytes (1 KiB).
	NameBytes int
}

// WithLimits sets the engine's limits (see Limits).
func WithLimits(l Limits) Option {
	return func(cf *config) { cf.maxResources, cf.maxRules, cf.maxNameBytes = l.Resources, l.Rules, l.NameBytes }
}

// checkLimits refuses rules rs of kind k that the engine's limits do not
// allow: more rules than Limits.Rules, or a string longer than
// Limits.NameBytes. The error is an *rules.Error.
func checkLimits[R, C any](eng *Engine, k *ruleKind[R, C], rs []R) error {
	if len(rs) > eng.maxRules {
		return &rules.Error{Kind: k.name, Index: -1, Reason: fmt.Sprintf(
			"%d rules, more than the engine's limit of %d rules of one kind; raise it with sluice.Limits.Rules",
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
				"%s %d bytes, more than the engine's limit of %d; raise it with sluice.Limits.NameBytes",
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
// the engine tracks (Limits.Resources). Must hold eng.mu.
func (eng *Engine) checkResources(set *rules.Set) error {
	names := map[string]bool{}
	resourceNames(set.Flow, names)
	resourceNames(set.CircuitBreaker, names)
	resourceNames(set.Param, names)
	if len(names) > eng.reg.max {
		return fmt.Errorf("sluice: the rules name %d resources, more than the engine's limit of %d; "+
			"raise it with sluice.Limits.Resources", len(names), eng.reg.max)
	}
	return nil
}
