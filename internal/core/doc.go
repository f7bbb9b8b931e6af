// Package core holds sluice's vocabulary: traffic types, block types, the
// block error every refusal returns, and the clock an engine reads.
//
// The engine's machinery, custom slots (package slots) and statistics
// (package stat) share these types from here; a program names them through
// package sluice, whose sluice.BlockError, sluice.ErrBlocked,
// sluice.Outbound, ... are these very types and values (vocabulary.go).
package core
