package ruledef

import (
	"sync"
	"time"
)

var zones sync.Map // name -> *time.Location

// LoadZone returns the time zone named name ("" is UTC), as
// time.LoadLocation does, which reads the zone database at every call:
// validating and building a rule set names a quota's zone several times.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, l)
	return l, nil
}
