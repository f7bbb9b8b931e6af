package core

import "fmt"

// Priority says how much an entry matters when a resource is overloaded:
// system protection and adaptive concurrency rules shed PrioritySheddable
// entries first and PriorityCritical ones last (see sluice.WithPriority).
// The zero value is PriorityDefault.
type Priority uint8

const (
	// PriorityDefault is the priority of an entry that names none.
	PriorityDefault Priority = iota
	// PrioritySheddable is work that can be dropped first: prefetches,
	// retries, batch jobs.
	PrioritySheddable
	// PriorityCritical is work that must get through: it keeps a share of
	// every adaptive limit and of system protection's capacity that other
	// work cannot take, and may borrow the next window of a QPS rule that
	// allows it (rules.Flow.PriorityWait).
	PriorityCritical
)

// String returns "default", "sheddable" or "critical".
func (p Priority) String() string {
	switch p {
	case PriorityDefault:
		return "default"
	case PrioritySheddable:
		return "sheddable"
	case PriorityCritical:
		return "critical"
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}
