// Package sluicetest holds the manual clock for the tests of package sluice
// itself. Those tests are in package sluice and cannot import the public
// sluicetest, which imports sluice (for its NewEngine); the public
// sluicetest.ManualClock wraps this one, so both behave alike. Tests of
// every other package use the public one.
package sluicetest
