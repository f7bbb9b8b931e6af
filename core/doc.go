// Package core holds sluice's vocabulary: traffic types, block types, the
// block error every refusal returns, and the clock an engine reads.
//
// This is the one home of these names: a program tells a refusal with
// errors.Is(err, core.ErrBlocked), reads it with errors.As into a
// *core.BlockError, and marks outgoing calls core.Outbound; custom slots
// (package slots) and adapters name the same types.
package core
