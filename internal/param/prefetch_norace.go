//go:build !race

package param

// prefetchOn: Prefetch loads lines (see Controller.Prefetch).
const prefetchOn = true
