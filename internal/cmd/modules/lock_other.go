//go:build !unix

package main

// lockCache does nothing where flock is missing: run one check at a time.
func lockCache() (unlock func(), err error) { return func() {}, nil }
