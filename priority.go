package sluice

import "github.com/sluice-go/sluice/internal/core"

// optPriority is the option kind of WithPriority.
const optPriority = optArg + 1

// WithPriority gives the entry priority p (the default is
// PriorityDefault). Under overload, system protection and adaptive
// concurrency rules refuse PrioritySheddable entries first, past three
// quarters of their limit, and PriorityCritical ones last: critical
// entries may fill a quarter more than the limit, a share no other entry
// can take. A QPS rule with PriorityWait lets a critical entry it would
// refuse wait for the next bucket of its window instead. A priority other
// than the three is read as the default.
func WithPriority(p core.Priority) EntryOption { return EntryOption{kind: optPriority, n: int64(p)} }
