package rules

// CircuitBreaker is a degrade rule. (Contract stub: issue 4 defines its
// fields and validation.)
type CircuitBreaker struct {
	// ID is an optional label for the rule.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
}

// Validate reports the first problem with the rule as an *Error, or nil.
func (r *CircuitBreaker) Validate() error { return nil }
