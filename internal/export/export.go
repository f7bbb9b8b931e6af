// Package export walks what a metrics exporter publishes of an engine, with
// names ready to be label values: the walk the Prometheus and
// OpenTelemetry adapters share, over the engine's public read views (Each
// and CircuitBreakerStates).
package export

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/stat"
)

// Walk reads what a metrics exporter publishes of eng, with names ready to
// be label values: resource is called with every resource and its
// statistics, then breaker with every circuit breaker, its resource, its
// rule's name (the rule's ID, or its index among the breaker rules when it
// has none) and its status. Either may be nil.
//
// Names come from resource names and rule IDs, which may come from traffic,
// and monitoring systems take only valid UTF-8 label values (Prometheus
// fails a whole scrape on one invalid value): each invalid byte becomes
// U+FFFD. A resource whose name, made valid so, equals one already passed
// is left out, and so is a breaker whose resource and rule name equal
// those of one already passed (two rules of one resource with one ID), so
// that no exporter ever sends two series with the same labels. Valid names
// are passed as they are, before any that had to be changed.
func Walk(eng *sluice.Engine, resource func(name string, s *stat.Snapshot), breaker func(resource, rule string, b *sluice.BreakerStatus)) {
	if resource != nil {
		resources(eng, resource)
	}
	if breaker == nil {
		return
	}
	var sent map[[2]string]bool
	for i, b := range eng.CircuitBreakerStates() {
		rule := b.Rule.ID
		if rule == "" {
			rule = strconv.Itoa(i)
		}
		key := [2]string{strings.ToValidUTF8(b.Rule.Resource, "\uFFFD"), strings.ToValidUTF8(rule, "\uFFFD")}
		if sent == nil {
			sent = map[[2]string]bool{}
		}
		if sent[key] {
			continue
		}
		sent[key] = true
		breaker(key[0], key[1], &b)
	}
}

// resources is Walk's walk over the resources.
func resources(eng *sluice.Engine, f func(name string, s *stat.Snapshot)) {
	type odd struct {
		name string
		s    stat.Snapshot
	}
	var (
		names []string // valid names, passed as they come
		odds  []odd
	)
	eng.Each(func(name string, s stat.Snapshot) {
		if !utf8.ValidString(name) {
			odds = append(odds, odd{name, s})
			return
		}
		names = append(names, name)
		f(name, &s)
	})
	if len(odds) == 0 {
		return
	}
	seen := make(map[string]bool, len(names)+len(odds))
	for _, n := range names {
		seen[n] = true
	}
	for i := range odds {
		l := strings.ToValidUTF8(odds[i].name, "\uFFFD")
		if !seen[l] {
			seen[l] = true
			f(l, &odds[i].s)
		}
	}
}
