// Package rules defines sluice's rule types (flow, isolation, system,
// circuit breaker, param), their validation, and decoding from JSON and YAML.
//
// Rules are plain values. Each type has a Validate method; the engine's
// loaders validate a whole set first and refuse it whole, with an *Error that
// names the rule's kind, index, resource and field, so the rules already in
// force stay in force.
package rules
