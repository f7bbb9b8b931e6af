// Package core holds sluice's vocabulary: traffic types, block types, the
// block error every refusal returns, and the clock an engine reads.
//
// Most programs never import core: the root package sluice re-exports what
// a caller needs (ErrBlocked, BlockError, the block and traffic types,
// Clock). Custom slots (package slots) and adapters name these types here.
package core
