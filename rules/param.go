package rules

// Param is a hot-parameter rule. (Contract stub: issue 6 defines its fields
// and validation.)
type Param struct {
	// ID is an optional label for the rule.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
}

// Validate reports the first problem with the rule as an *Error, or nil.
func (r *Param) Validate() error { return nil }
