// Package core holds sluice's runtime contracts: traffic and block types, the
// block error, the clock, the per-entry context that built-in and custom slots
// see, and the interfaces and chain for user-registered slots.
//
// Most users never import core directly: the root package sluice re-exports
// what a caller needs (ErrBlocked, BlockError, Inbound, Outbound). Custom slot
// authors and tests that drive time by hand (ManualClock) import it.
package core
