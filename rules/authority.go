package rules

import "github.com/sluice-go/sluice/internal/ruledef"

// Authority allows or refuses callers of one resource by who they are
// (sluice.WithCaller; Sentinel's authority rule). With Allow, only the
// listed callers enter; with Deny, every caller but the listed ones does.
// Strict also refuses an entry that names no caller, which otherwise
// passes (as in Sentinel, whose origin check lets an empty origin through):
// an allow list that must hold for every request needs Strict. A refusal
// is sluice.BlockAuthority, which the HTTP adapters answer with 403 and the
// gRPC adapter with PermissionDenied.
//
// A resource takes one authority rule. Callers are compared byte for byte
// (no case folding). An identity is only as trustworthy as its source:
// see docs/middleware.md.
type Authority struct {
	// ID is an optional label, shown in block errors and logs.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Allow lists the callers that may enter. Not with Deny.
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	// Deny lists the callers refused. Not with Allow.
	Deny []string `json:"deny,omitempty" yaml:"deny,omitempty"`
	// Strict refuses an entry that names no caller.
	Strict bool `json:"strict,omitempty" yaml:"strict,omitempty"`
	// Shadow puts the rule in shadow mode (see Flow.Shadow).
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
}

// validate reports the first problem with the rule as an *Error, or nil.
func (r *Authority) validate() error {
	c := &check{kind: "authority", resource: r.Resource}
	c.fail(r.Resource == "", "Resource", "must not be empty")
	c.fail(len(r.Allow) > 0 && len(r.Deny) > 0, "Deny", "must be empty when Allow is set: a rule is an allow list "+
		"or a deny list (use two resources, or list in Allow only those allowed)")
	c.fail(len(r.Allow) == 0 && len(r.Deny) == 0 && !r.Strict, "Allow",
		"must list callers, or Deny must, or Strict be set: this rule refuses nothing")
	c.callers("Allow", r.Allow)
	c.callers("Deny", r.Deny)
	return c.err
}

// callers checks a list of caller identities named in a rule's field: at
// most ruledef.MaxCallers, each one an entry could carry (see
// sluice.WithCaller), none twice.
func (c *check) callers(field string, list []string) {
	c.fail(len(list) > ruledef.MaxCallers, field, "must list at most %d callers, got %d", ruledef.MaxCallers, len(list))
	if c.err != nil {
		return
	}
	seen := make(map[string]bool, len(list))
	for i, s := range list {
		c.fail(s == "", field, "caller %d is empty (an entry without a caller is refused by Strict, not listed)", i)
		if s != "" {
			if p := ruledef.CallerProblem(s); p != "" {
				c.fail(true, field, "caller %d %q is not a caller an entry can name: %s", i, clip(s, 40), p)
			}
		}
		c.fail(seen[s], field, "lists caller %q twice", clip(s, 40))
		seen[s] = true
	}
}
