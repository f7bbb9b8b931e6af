package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"

	"github.com/sluice-go/sluice/rules"
)

// Errors shown to a dashboard user name what the user sees: the forms'
// field labels (the rule files' keys, "cluster.mode"), not the Go fields
// the rules package names ("Cluster.Mode"), and plain limits ("the
// document is 4.2 MiB, larger than the limit of 4 MiB"), not the library's
// settings ("raise DecodeLimits.MaxBytes").

// maxShownDoc is the most of a refused document the rules page shows
// again: a larger one is not echoed back (a page of megabytes, and the
// text of whoever sent it); the page shows its first lines and the editor
// holds the version in force.
const maxShownDoc = 256 << 10

// shownHead is how much of a refused document too large to show again
// the page quotes.
const shownHead = 2 << 10

// ruleTypes are the rule types by the kind rules.Error names.
var ruleTypes = map[string]reflect.Type{
	"flow":            reflect.TypeFor[rules.Flow](),
	"isolation":       reflect.TypeFor[rules.Flow](),
	"system":          reflect.TypeFor[rules.System](),
	"circuit breaker": reflect.TypeFor[rules.CircuitBreaker](),
	"circuitBreaker":  reflect.TypeFor[rules.CircuitBreaker](),
	"param":           reflect.TypeFor[rules.Param](),
	"authority":       reflect.TypeFor[rules.Authority](),
}

// goFields maps each kind's Go field paths ("Cluster.Mode") to the form's
// labels ("cluster.mode").
var goFields = func() map[string]map[string]string {
	out := map[string]map[string]string{}
	for kind, t := range ruleTypes {
		m := map[string]string{}
		var walk func(t reflect.Type, goPrefix, yamlPrefix string)
		walk = func(t reflect.Type, goPrefix, yamlPrefix string) {
			for i := range t.NumField() {
				sf := t.Field(i)
				name, _ := yamlName(sf)
				if name == "" || name == "-" || !sf.IsExported() {
					continue
				}
				m[goPrefix+sf.Name] = yamlPrefix + name
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct && ft != durationType {
					walk(ft, goPrefix+sf.Name+".", yamlPrefix+name+".")
				}
			}
		}
		walk(t, "", "")
		for name, label := range flatFields[t] {
			m[name] = label
		}
		out[kind] = m
	}
	return out
}()

// flatFields are the flat fields of rule files written before the strategy
// sections, which the rules package still reads (and names in its errors)
// besides each type's own: flow's strategy and behavior fields, param's
// behavior.
var flatFields = map[reflect.Type]map[string]string{
	reflect.TypeFor[rules.Flow](): {"Strategy": "strategy", "Behavior": "behavior", "MaxQueueing": "maxQueueing",
		"WarmUpPeriod": "warmUpPeriod", "ColdFactor": "coldFactor", "Burst": "burst"},
	reflect.TypeFor[rules.Param](): {"Behavior": "behavior", "MaxQueueing": "maxQueueing"},
}

// fieldLabel is the form's label of kind's field as rules.Error names it;
// a name it does not know (a key as written) is returned as it is.
func fieldLabel(kind, field string) string {
	if l, ok := goFields[kind][field]; ok {
		return l
	}
	return field
}

// goName matches a Go field path in a reason: "Threshold",
// "Cluster.LocalThreshold", "Adaptive.Min".
var goName = regexp.MustCompile(`\b[A-Z][A-Za-z]*(\.[A-Z][A-Za-z]*)?\b`)

// plainReason is the reason of a problem with kind's field with the Go
// field names written as the form's labels (a name of the field's section
// too: "Min" of "Adaptive.Max") and the library's settings left out.
func plainReason(kind, field, reason string) string {
	reason = plainLimits(reason)
	m := goFields[kind]
	if m == nil {
		return reason
	}
	section, _, _ := strings.Cut(field, ".")
	return goName.ReplaceAllStringFunc(reason, func(s string) string {
		if l, ok := m[s]; ok {
			return l
		}
		if l, ok := m[section+"."+s]; ok && section != field {
			return l[strings.LastIndexByte(l, '.')+1:]
		}
		return s
	})
}

// raiseHint is the advice of the rules package's limits, for a
// program's author: a dashboard user has no such setting.
var raiseHint = regexp.MustCompile(`;?\s*raise DecodeLimits\.\w+( \([^)]*\))? to read (it|them)`)

// plainLimits is msg without the advice to raise a library's limit.
func plainLimits(msg string) string { return raiseHint.ReplaceAllString(msg, "") }

// size writes n bytes for a reader: "4 MiB", "4.2 MiB", "300 KiB".
func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// tooLargeDoc is the refusal of a document larger than the rules' limit,
// or "".
func tooLargeDoc(doc []byte) string {
	if len(doc) <= rules.DefaultMaxBytes {
		return ""
	}
	return fmt.Sprintf("Not saved: the document is %s, larger than the limit of %s; the rules in force are unchanged.",
		size(len(doc)), size(rules.DefaultMaxBytes))
}

// headOf is the first shownHead bytes of doc, cut at a line's end when
// one is near, for a page to quote.
func headOf(doc []byte) string {
	if len(doc) <= shownHead {
		return string(doc)
	}
	h := doc[:shownHead]
	if i := strings.LastIndexByte(string(h), '\n'); i > shownHead/2 {
		h = h[:i+1]
	}
	return strings.ToValidUTF8(string(h), "")
}

// formTooLarge says why a request's form could not be read: in plain
// words when it is over maxForm.
func formTooLarge(err error) string {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return "Nothing was changed: the request is larger than the limit of " + size(maxForm) +
			" (a rule document may have " + size(rules.DefaultMaxBytes) + ")."
	}
	return "Nothing was changed: the request cannot be read: " + err.Error()
}
