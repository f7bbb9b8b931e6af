//go:build !race

package sluicehttp_test

const raceEnabled = false
