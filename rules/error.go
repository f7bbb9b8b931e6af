package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error is a problem with one rule. Decode and the engine's loaders return
// it (possibly wrapped) when they refuse a rule set; the rules in force stay.
type Error struct {
	// Kind is the rule kind: "flow", "isolation", "system", "circuit
	// breaker", "param".
	Kind string
	// Index is the rule's position in its kind's list, or -1 when the
	// list as a whole is the problem.
	Index int
	// Resource is the rule's resource (empty for system rules).
	Resource string
	// Field is the offending field's Go name ("Cluster.Mode"), or the key
	// as written for a field the rule type does not have; empty when the
	// rule as a whole is the problem (a duplicate).
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *Error) Error() string {
	s := "rules: " + e.Kind + " rule"
	if e.Index >= 0 {
		s += " " + strconv.Itoa(e.Index)
	}
	if e.Resource != "" {
		s += " (resource " + strconv.Quote(clip(e.Resource, 128)) + ")"
	}
	if e.Field != "" && !strings.HasPrefix(e.Reason, "unknown field") {
		s += ": " + e.Field
	}
	return s + ": " + e.Reason
}

// clip shortens s to about n bytes for an error message, which should not
// be the size of a 1 MiB name.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// fieldErr is the *Error of field of a rule of kind on resource; Set.Validate
// sets its Index.
func fieldErr(kind, resource, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Resource: resource, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// check validates one rule: its first failed test is the rule's problem.
type check struct {
	kind, resource string
	err            error // an *Error
}

// fail records the problem of field when bad, unless an earlier test failed.
func (c *check) fail(bad bool, field, format string, args ...any) {
	if bad && c.err == nil {
		c.err = fieldErr(c.kind, c.resource, field, format, unbox(args)...)
	}
}

// unbox copies args, so that they escape only when a test fails: a valid
// rule is checked without allocating.
func unbox(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case float64:
			out[i] = v
		case time.Duration:
			out[i] = v
		case int:
			out[i] = v
		case int64:
			out[i] = v
		case string:
			out[i] = strings.Clone(v)
		}
	}
	return out
}
