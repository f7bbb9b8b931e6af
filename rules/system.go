package rules

// System is a system adaptive protection rule. (Contract stub: issue 3
// defines its fields and validation.)
type System struct {
	// ID is an optional label for the rule.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
}

// Validate reports the first problem with the rule as an *Error, or nil.
func (r *System) Validate() error { return nil }
