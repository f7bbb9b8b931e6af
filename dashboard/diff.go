package dashboard

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-go/sluice/rules"
)

// maxDiffRules bounds the lines a rule diff lists: beyond them it says
// how many more changed.
const maxDiffRules = 200

// ruleDiff says what changed from old to new, one line a rule, naming it
// by kind and resource (or id, or metric): "flow rule GET /api: threshold
// 50 → 20", "isolation rule GET /search added: threshold 8", "param rule
// POST /orders removed". Rules pair up by kind and name, in order among
// the rules of one name; their order in the document does not count. It
// compares decoded rules, so that it costs a pass over the rules whatever
// their number: only the rules that differ are written out.
func ruleDiff(old, new rules.Set) []string {
	var out []string
	more := 0
	emit := func(s string) {
		if len(out) < maxDiffRules {
			out = append(out, s)
		} else {
			more++
		}
	}
	diffKind(&old.Flow, &new.Flow, "flow", func(r rules.Flow) string { return nameOf(r.ID, r.Resource) },
		func(r rules.Flow) rules.Set { return rules.Set{Flow: []rules.Flow{r}} }, emit)
	diffKind(&old.System, &new.System, "system", func(r rules.System) string { return nameOf(r.ID, string(r.Metric)) },
		func(r rules.System) rules.Set { return rules.Set{System: []rules.System{r}} }, emit)
	diffKind(&old.CircuitBreaker, &new.CircuitBreaker, "circuit breaker", func(r rules.CircuitBreaker) string { return nameOf(r.ID, r.Resource) },
		func(r rules.CircuitBreaker) rules.Set { return rules.Set{CircuitBreaker: []rules.CircuitBreaker{r}} }, emit)
	diffKind(&old.Param, &new.Param, "param", func(r rules.Param) string { return nameOf(r.ID, r.Resource) },
		func(r rules.Param) rules.Set { return rules.Set{Param: []rules.Param{r}} }, emit)
	diffKind(&old.Authority, &new.Authority, "authority", func(r rules.Authority) string { return nameOf(r.ID, r.Resource) },
		func(r rules.Authority) rules.Set { return rules.Set{Authority: []rules.Authority{r}} }, emit)
	if more > 0 {
		out = append(out, strconv.Itoa(more)+" more rules changed")
	}
	return out
}

// nameOf names a rule: its resource (or metric), and its id when it has one.
func nameOf(id, name string) string {
	if id != "" {
		return name + " (id " + id + ")"
	}
	return name
}

func diffKind[T any](old, new *[]T, kind string, name func(T) string, one func(T) rules.Set, emit func(string)) {
	// The k-th rule of a name in old pairs with the k-th of that name in new.
	type key struct {
		name string
		k    int
	}
	seen := map[string]int{}
	olds := make(map[key]int, len(*old))
	var oldKeys []key
	for i, r := range *old {
		n := name(r)
		k := key{n, seen[n]}
		seen[n]++
		olds[k] = i
		oldKeys = append(oldKeys, k)
	}
	clear(seen)
	matched := make(map[key]bool, len(*new))
	for _, r := range *new {
		n := name(r)
		k := key{n, seen[n]}
		seen[n]++
		i, ok := olds[k]
		if !ok {
			emit(kind + " rule " + n + " added: " + strings.Join(fieldsOf(one(r)).list(), ", "))
			continue
		}
		matched[k] = true
		if reflect.DeepEqual((*old)[i], r) {
			continue
		}
		a, b := fieldsOf(one((*old)[i])), fieldsOf(one(r))
		var parts []string
		for _, f := range b.order {
			if va, ok := a.vals[f]; !ok {
				parts = append(parts, f+" "+b.vals[f]+" (new)")
			} else if va != b.vals[f] {
				parts = append(parts, f+" "+va+" → "+b.vals[f])
			}
		}
		for _, f := range a.order {
			if _, ok := b.vals[f]; !ok {
				parts = append(parts, f+" "+a.vals[f]+" (removed)")
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "changed")
		}
		emit(kind + " rule " + n + ": " + strings.Join(parts, "; "))
	}
	for _, k := range oldKeys {
		if !matched[k] {
			emit(kind + " rule " + k.name + " removed")
		}
	}
}

// fields are a rule's fields as the rule file writes them.
type fields struct {
	order []string
	vals  map[string]string
}

func (f fields) list() []string {
	out := make([]string, 0, len(f.order))
	for _, k := range f.order {
		out = append(out, k+" "+f.vals[k])
	}
	return out
}

// fieldsOf splits the rule file's text of one rule into its top-level
// fields; a nested value (a cluster section, exceptions) is one value, its
// lines joined.
func fieldsOf(one rules.Set) fields {
	f := fields{vals: map[string]string{}}
	cur := ""
	for _, l := range strings.Split(ruleText(one), "\n") {
		if l == "" {
			continue
		}
		if l[0] != ' ' {
			k, v, _ := strings.Cut(l, ":")
			cur = k
			f.order = append(f.order, k)
			f.vals[k] = strings.TrimSpace(v)
			continue
		}
		if cur != "" {
			v := f.vals[cur]
			if v != "" {
				v += ", "
			}
			f.vals[cur] = v + strings.TrimSpace(l)
		}
	}
	return f
}

// diffCache keeps the rule diffs of saved versions (a version never
// changes), bounded, and the last versions decoded (a version's diff and
// the next one's both read it).
type diffCache struct {
	mu      sync.Mutex
	m       map[string][]string
	decoded map[string]rules.Set
}

// maxDecoded bounds the decoded versions kept.
const maxDecoded = 8

const maxCachedDiffs = 1000

// versionDiff returns what version v of app changed from the version
// before it (the empty set before version 1), or nil when either cannot
// be read or decoded.
func (d *Dashboard) versionDiff(ctx context.Context, app string, v int64) []string {
	key := app + "\x00" + strconv.FormatInt(v, 10)
	c := &d.diffs
	c.mu.Lock()
	out, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return out
	}
	cur, err := d.decodedVersion(ctx, app, v)
	if err != nil {
		return nil
	}
	var before rules.Set
	if v > 1 {
		if before, err = d.decodedVersion(ctx, app, v-1); err != nil {
			return nil
		}
	}
	if out = ruleDiff(before, cur); out == nil {
		out = []string{}
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedDiffs {
		c.m = map[string][]string{}
	}
	c.m[key] = out
	c.mu.Unlock()
	return out
}

// decodedVersion returns version v of app's rules, decoded.
func (d *Dashboard) decodedVersion(ctx context.Context, app string, v int64) (rules.Set, error) {
	key := app + "\x00" + strconv.FormatInt(v, 10)
	c := &d.diffs
	c.mu.Lock()
	set, ok := c.decoded[key]
	c.mu.Unlock()
	if ok {
		return set, nil
	}
	rv, err := d.store.Version(ctx, app, v)
	if err != nil {
		return rules.Set{}, err
	}
	if strings.TrimSpace(string(rv.Doc)) != "" {
		if set, err = rules.Decode(rv.Doc, rules.YAML); err != nil {
			return rules.Set{}, err
		}
	}
	c.mu.Lock()
	if c.decoded == nil || len(c.decoded) >= maxDecoded {
		c.decoded = map[string]rules.Set{}
	}
	c.decoded[key] = set
	c.mu.Unlock()
	return set, nil
}

// diffDocs is ruleDiff of two rule documents.
func diffDocs(old, new []byte) ([]string, error) {
	decode := func(doc []byte) (rules.Set, error) {
		if strings.TrimSpace(string(doc)) == "" {
			return rules.Set{}, nil
		}
		return rules.Decode(doc, rules.YAML)
	}
	a, err := decode(old)
	if err != nil {
		return nil, err
	}
	b, err := decode(new)
	if err != nil {
		return nil, err
	}
	out := ruleDiff(a, b)
	if out == nil {
		out = []string{}
	}
	return out, nil
}
