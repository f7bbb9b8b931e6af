package rules

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is a validation failure of one rule. Loaders return it (possibly
// wrapped) when they refuse a rule set.
type Error struct {
	// Kind is the rule kind: "flow", "isolation", "system", "circuit
	// breaker", "param".
	Kind string
	// Index is the rule's position in the set that was loaded, or -1 when a
	// single rule was validated on its own.
	Index int
	// Resource is the rule's resource (empty for system rules).
	Resource string
	// Field is the offending field's Go name, or, for a field the rule type
	// does not have, the key as the document wrote it (the Reason, which
	// begins "unknown field", quotes it, so Error does not repeat it). It
	// is empty when the rule as a whole is the problem (a duplicate).
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *Error) Error() string {
	b := make([]byte, 0, 96)
	b = append(b, "rules: "...)
	b = append(b, e.Kind...)
	b = append(b, " rule"...)
	if e.Index >= 0 {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(e.Index), 10)
	}
	if e.Resource != "" {
		b = append(b, " (resource "...)
		b = strconv.AppendQuote(b, clipName(e.Resource))
		b = append(b, ')')
	}
	b = append(b, ": "...)
	if e.Field != "" && !strings.HasPrefix(e.Reason, unknownField(e.Field)) {
		b = append(b, e.Field...)
		b = append(b, ": "...)
	}
	b = append(b, e.Reason...)
	return string(b)
}

// unknownField begins the Reason of an unknown field.
func unknownField(key string) string { return fmt.Sprintf("unknown field %q", clip(key)) }

// clipName shortens a name longer than 128 bytes for an error message,
// which should not be the size of a 1 MiB name.
func clipName(s string) string {
	if len(s) <= 128 {
		return s
	}
	i := 125
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func fieldErr(kind, resource, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Index: -1, Resource: resource, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// At returns err with its Index set to i when it is an *Error; other errors
// are returned unchanged. Loaders use it to name the rule's position.
func At(err error, i int) error {
	if e, ok := err.(*Error); ok {
		c := *e
		c.Index = i
		return &c
	}
	return err
}
