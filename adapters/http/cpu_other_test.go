//go:build !unix

package sluicehttp_test

import "testing"

func processCPU() int64 { return 0 }

func reportCPU(*testing.B, int64) {}
