// Package system is the system adaptive protection slot. (Contract stub:
// issue 3 implements it.)
package system

import (
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// Config is what the engine gives the slot.
type Config struct {
	// Clock is the engine's clock.
	Clock core.Clock
	// Inbound is the engine's global inbound node.
	Inbound *stat.Node
}

// Slot checks inbound entries against the system rules in force.
type Slot struct{}

// New returns a slot with no rules.
func New(cfg Config) *Slot { return &Slot{} }

// Active reports whether any rule is in force; the engine skips Check when
// it is false.
func (s *Slot) Active() bool { return false }

// Check decides on one inbound entry.
func (s *Slot) Check(ec *core.EntryContext) *core.BlockError { return nil }

// Load validates rs whole and puts it in force, or returns an error and keeps
// the rules in force.
func (s *Slot) Load(rs []rules.System) error { return nil }

// Rules returns a copy of the rules in force.
func (s *Slot) Rules() []rules.System { return nil }

// Close stops everything the slot started and waits for it.
func (s *Slot) Close() error { return nil }
