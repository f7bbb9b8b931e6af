package dashboard

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/rules"
)

// The rules page's per-kind forms are made from the rule types by
// reflection over their yaml tags, so that a field added to a rule type
// appears in its form (TestFormsHaveEveryField).

// ruleField is one field of a rule form.
type ruleField struct {
	Name     string   // the yaml path: "threshold", "cluster.mode"
	Label    string   // the yaml key: "threshold", "mode"
	Type     string   // text, number, integer, duration, enum, bool, map, section
	Options  []string // an enum's values, as the rule files spell them
	Required bool     // written even when zero (no omitempty)
	Section  string   // the optional section the field belongs to ("cluster"), or ""
	Min      string   // the least value the form takes, or ""
}

// ruleForm is the form of one kind, or of a use of it.
type ruleForm struct {
	ID     string // the form's name: the kind's key, or "concurrency"
	Title  string // what the form chooser says
	Kind   string // the kind's key, under which the rule is written
	Fields []ruleField
	// Fixed are fields the form always writes, as hidden inputs: the
	// concurrency form's metric.
	Fixed []formField
}

// concurrencyFields are the fields of a flow rule of the concurrency
// metric: the others count requests per interval (rules.Flow.validate
// refuses them with this metric) or need a QPS rule (tiers, exact,
// priorityWait).
var concurrencyFields = []string{"id", "resource", "threshold", "refResource", "cluster", "shadow", "adaptive"}

// concurrencyForm is the form of a flow rule of the concurrency metric
// (requests in flight, as Sentinel's thread-count rules and isolation
// rules): the flow form's fields that apply, the threshold a whole
// number.
func concurrencyForm(flow ruleForm) ruleForm {
	f := ruleForm{ID: "concurrency", Title: "concurrency (requests in flight)", Kind: flow.Kind,
		Fixed: []formField{{Name: "metric", Value: string(rules.Concurrency)}}}
	for _, ff := range flow.Fields {
		top, _, _ := strings.Cut(ff.Name, ".")
		if !slices.Contains(concurrencyFields, top) {
			continue
		}
		if ff.Name == "threshold" {
			// Not required by the browser: the adaptive section may set
			// the limit instead (the script checks it).
			ff.Label, ff.Type, ff.Min, ff.Required = "threshold (most in flight)", "integer", "1", false
		}
		if !fleetConcurrencyField(&ff) {
			continue
		}
		f.Fields = append(f.Fields, ff)
	}
	return f
}

// enumOptions are the values of each enumeration of the rule types, as the
// rule files spell them. TestFormEnums checks them against rules.Validate's
// error, which lists the values it accepts.
var enumOptions = map[reflect.Type][]string{
	reflect.TypeFor[rules.FlowMetric]():      {string(rules.QPS), string(rules.Concurrency)},
	reflect.TypeFor[rules.BreakerStrategy](): {string(rules.SlowRequestRatio), string(rules.ErrorRatio), string(rules.ErrorCount)},
	reflect.TypeFor[rules.SystemMetric]():    {string(rules.InboundQPS), string(rules.InboundConcurrency), string(rules.InboundAvgRT), string(rules.Load1), string(rules.CPUUsage)},
	reflect.TypeFor[rules.SystemStrategy]():  {string(rules.PlainThreshold), string(rules.BBR)},
	reflect.TypeFor[rules.ClusterMode]():     {string(rules.ClusterTotal), string(rules.ClusterPerInstance)},
	reflect.TypeFor[rules.ClusterFallback](): {string(rules.FallbackLocal), string(rules.FallbackPass), string(rules.FallbackBlock)},
	reflect.TypeFor[rules.TierMetric]():      {string(rules.TierAvgRT), string(rules.TierErrorRatio), string(rules.TierCPU)},
}

// ruleForms are the forms of the kinds, in the rule file's order; made
// once, when the package loads (a type the forms cannot show panics
// there, and in the tests).
var ruleForms = makeForms()

func yamlName(f reflect.StructField) (name string, omitempty bool) {
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	return name, strings.Contains(opts, "omitempty")
}

func makeForms() []ruleForm {
	var out []ruleForm
	st := reflect.TypeFor[rules.Set]()
	for i := range st.NumField() {
		f := st.Field(i)
		kind, _ := yamlName(f)
		if kind == "" || kind == "-" || f.Type.Kind() != reflect.Slice {
			continue
		}
		out = append(out, ruleForm{ID: kind, Title: kind, Kind: kind, Fields: formFields(f.Type.Elem(), "", "")})
		if kind == "flow" {
			out = append(out, concurrencyForm(out[len(out)-1]))
		}
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// complexity: a case per field type the rule forms show (string, number, bool, duration, pointer, slice, struct)
func formFields(t reflect.Type, prefix, section string) []ruleField {
	var out []ruleField
	for i := range t.NumField() {
		sf := t.Field(i)
		name, omit := yamlName(sf)
		if name == "" || name == "-" || !sf.IsExported() {
			continue
		}
		ff := ruleField{Name: prefix + name, Label: name, Required: !omit, Section: section}
		ft := sf.Type
		switch {
		case ft == durationType:
			ff.Type = "duration"
		case ft.Kind() == reflect.String && ft != reflect.TypeFor[string]():
			opts, ok := enumOptions[ft]
			if !ok {
				panic(fmt.Sprintf("dashboard: the rule forms know no values of %s", ft))
			}
			ff.Type, ff.Options = "enum", opts
		case ft.Kind() == reflect.String:
			ff.Type = "text"
		case ft.Kind() == reflect.Float64:
			ff.Type = "number"
		case ft.Kind() == reflect.Int || ft.Kind() == reflect.Int64:
			ff.Type = "integer"
		case ft.Kind() == reflect.Bool:
			ff.Type = "bool"
		case ft.Kind() == reflect.Map && ft.Key().Kind() == reflect.String && ft.Elem().Kind() == reflect.Int64:
			ff.Type = "map"
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			ff.Type = "list" // rules.Flow.Tiers: a JSON list of objects
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			ff.Type = "names" // rules.Authority.Allow: a JSON list of strings
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && prefix == "":
			ff.Type = "section"
			out = append(out, ff)
			out = append(out, formFields(ft.Elem(), name+".", name)...)
			continue
		default:
			panic(fmt.Sprintf("dashboard: the rule forms cannot show %s.%s (%s)", t.Name(), sf.Name, ft))
		}
		out = append(out, ff)
	}
	return out
}

// formValues are the fields of rule (a rule type's value) that are not
// zero, as the form's inputs hold them, as JSON: {"threshold": "50",
// "cluster": "on", "cluster.mode": "total", "exceptions": "{\"a\":5}"};
// "edit" fills the form with them.
func formValues(rule any) string {
	m := map[string]string{}
	collectValues(reflect.ValueOf(rule), "", m)
	b, err := json.Marshal(m)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// complexity: a case per field type, the inverse of formFields
func collectValues(v reflect.Value, prefix string, m map[string]string) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _ := yamlName(sf)
		if name == "" || name == "-" || !sf.IsExported() {
			continue
		}
		fv := v.Field(i)
		if fv.IsZero() {
			continue
		}
		key := prefix + name
		switch {
		case fv.Type() == durationType:
			m[key] = time.Duration(fv.Int()).String()
		case fv.Kind() == reflect.String:
			m[key] = fv.String()
		case fv.Kind() == reflect.Float64:
			m[key] = strconv.FormatFloat(fv.Float(), 'g', -1, 64)
		case fv.Kind() == reflect.Int || fv.Kind() == reflect.Int64:
			m[key] = strconv.FormatInt(fv.Int(), 10)
		case fv.Kind() == reflect.Bool:
			m[key] = "on"
		case fv.Kind() == reflect.Map:
			keys := fv.MapKeys()
			sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
			var sb strings.Builder
			sb.WriteString("{")
			for j, k := range keys {
				if j > 0 {
					sb.WriteString(", ")
				}
				kb, _ := json.Marshal(k.String())
				fmt.Fprintf(&sb, "%s: %d", kb, fv.MapIndex(k).Int())
			}
			sb.WriteString("}")
			m[key] = sb.String()
		case fv.Kind() == reflect.Slice:
			if b, err := json.Marshal(fv.Interface()); err == nil {
				m[key] = string(b)
			}
		case fv.Kind() == reflect.Pointer:
			m[key] = "on"
			collectValues(fv.Elem(), key+".", m)
		}
	}
}

// Forms are the per-kind forms the rules page shows beside the editor.
func (*rulesData) Forms() []ruleForm { return ruleForms }

// oneValues is formValues of the one rule of one.
func oneValues(one rules.Set) string {
	switch {
	case len(one.Flow) == 1:
		return formValues(one.Flow[0])
	case len(one.System) == 1:
		return formValues(one.System[0])
	case len(one.CircuitBreaker) == 1:
		return formValues(one.CircuitBreaker[0])
	case len(one.Param) == 1:
		return formValues(one.Param[0])
	}
	return "{}"
}
