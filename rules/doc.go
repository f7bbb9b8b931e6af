// Package rules defines sluice's rule types (flow, system, circuit breaker,
// param, authority), their validation (Set.Validate), and their JSON and YAML documents
// (Decode, Encode). A set is refused whole, with an *Error that names the
// rule's kind, index, resource and field, so the rules in force stay.
package rules
