//go:build !linux

package sluiceredis

import "syscall"

// childProcAttr: outside Linux the test's cleanup (and its context's
// timeout) kill the children.
func childProcAttr() *syscall.SysProcAttr { return nil }
