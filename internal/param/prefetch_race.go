//go:build race

package param

// prefetchOn: the race detector would report Prefetch's racy reads.
const prefetchOn = false
