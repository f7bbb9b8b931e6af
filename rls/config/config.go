// Package config reads rate-limit configs in envoyproxy/ratelimit's format
// (domains of nested descriptors with rate_limit entries), for sluice-rls:
// a file or a folder of files, bounded and checked whole, with errors that
// name the file, the line and the descriptor.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Unit is the period of a limit. Its windows are aligned to the Unix epoch,
// as envoyproxy/ratelimit aligns them: a minute starts at a whole minute, a
// month is 30 days and a year 365 days counted from 1970-01-01.
type Unit uint8

// The units of envoyproxy/ratelimit's config (and of the RateLimitResponse's
// RateLimit.Unit enum, whose numbers they share).
const (
	UnitUnknown Unit = iota
	UnitSecond
	UnitMinute
	UnitHour
	UnitDay
	UnitMonth
	UnitYear
	UnitWeek
)

var unitNames = map[string]Unit{
	"second": UnitSecond, "minute": UnitMinute, "hour": UnitHour, "day": UnitDay,
	"week": UnitWeek, "month": UnitMonth, "year": UnitYear,
}

// Seconds is the length of one window of the unit, in seconds (0 for
// UnitUnknown).
func (u Unit) Seconds() int64 {
	switch u {
	case UnitSecond:
		return 1
	case UnitMinute:
		return 60
	case UnitHour:
		return 3600
	case UnitDay:
		return 86400
	case UnitWeek:
		return 7 * 86400
	case UnitMonth:
		return 30 * 86400
	case UnitYear:
		return 365 * 86400
	}
	return 0
}

// String returns the unit's name in the config ("second", ...).
func (u Unit) String() string {
	for name, v := range unitNames {
		if v == u {
			return name
		}
	}
	return "unknown"
}

// Limit is one rate_limit of a config: RequestsPerUnit hits per Unit window.
type Limit struct {
	// Key is the limit's path in the config, "domain.key_value.key", the
	// name its metrics carry.
	Key             string
	RequestsPerUnit uint32
	Unit            Unit
	// Unlimited descriptors are answered OK without counting.
	Unlimited bool
	// Shadow counts and reports over-limit descriptors but answers OK.
	Shadow bool
	// Quota makes the descriptor a quota: a request is refused for quotas
	// only when every quota descriptor of it is over its limit.
	Quota bool
	// Detailed names the metrics after the request's values, not the
	// config's path.
	Detailed bool
	// Name is what other limits' Replaces refer to.
	Name string
	// Replaces lists the names of limits this one switches off when both
	// apply to one request.
	Replaces []string
}

// Bounds of a config, so that a hostile or mistaken file cannot make the
// service use unbounded memory or time.
const (
	// MaxBytes is the most bytes read from one config file.
	MaxBytes = 4 << 20
	// MaxFiles is the most files read from a config folder.
	MaxFiles = 1000
	// MaxDepth is the deepest nesting of descriptors.
	MaxDepth = 32
	// MaxDescriptors is the most descriptors of all files together.
	MaxDescriptors = 100_000
	// maxNodes bounds the YAML nodes walked (aliases are walked where used).
	maxNodes = 2_000_000
)

// descriptorBudget is MaxDescriptors, lowered by tests that reach it.
var descriptorBudget = MaxDescriptors

// Config is a loaded set of domains. It is immutable once loaded and safe
// for concurrent use.
type Config struct {
	domains map[string]*node
	files   []string
	count   int
}

// Domains returns the names of the config's domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Descriptors returns how many descriptors the config holds.
func (c *Config) Descriptors() int { return c.count }

type wildcard struct {
	key   string   // "key_va*ue"
	parts []string // the key split on "*"
}

type node struct {
	children  map[string]*node // by "key_value", or "key" for key-only entries
	wildcards []wildcard       // this level's wildcard entries, in file order
	limit     *Limit
	share     bool   // share_threshold: values matching the wildcard share one counter
	pattern   string // the wildcard value, with share
}

// Error is a config refused with the file, line and reason. The
// config in force stays.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// Load reads a config file, or every .yaml and .yml file of a folder
// (not its subfolders, in name order), in envoyproxy/ratelimit's format.
// A domain may appear in one file only. Any error refuses the whole config.
func Load(path string) (*Config, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	b := newBuilder()
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			return nil, err
		}
		if err := b.add(f, data); err != nil {
			return nil, err
		}
	}
	b.cfg.files = files
	return b.cfg, nil
}

// Files returns the config files LoadConfig reads for path: path itself,
// or a folder's .yaml and .yml files in name order.
func Files(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	return configFiles(path)
}

func configFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	if len(files) > MaxFiles {
		return nil, fmt.Errorf("%s: %d config files, at most %d", dir, len(files), MaxFiles)
	}
	sort.Strings(files)
	return files, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxBytes {
		return nil, &Error{File: path, Msg: fmt.Sprintf("larger than %d bytes", MaxBytes)}
	}
	return data, nil
}

// Parse reads one document set (one file's content) in
// envoyproxy/ratelimit's format; name labels errors. A file may hold several
// YAML documents, one domain each.
func Parse(name string, data []byte) (*Config, error) {
	if len(data) > MaxBytes {
		return nil, &Error{File: name, Msg: fmt.Sprintf("larger than %d bytes", MaxBytes)}
	}
	b := newBuilder()
	if err := b.add(name, data); err != nil {
		return nil, err
	}
	b.cfg.files = []string{name}
	return b.cfg, nil
}

type builder struct {
	cfg   *Config
	file  string
	nodes int
}

func newBuilder() *builder {
	return &builder{cfg: &Config{domains: map[string]*node{}}}
}

func (b *builder) errf(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{File: b.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (b *builder) add(file string, data []byte) error {
	b.file = file
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return &Error{File: file, Msg: "invalid YAML: " + err.Error()}
		}
		docs++
		if len(doc.Content) == 0 {
			continue
		}
		if err := b.domain(doc.Content[0]); err != nil {
			return err
		}
	}
	if docs == 0 {
		return &Error{File: file, Msg: "empty config file"}
	}
	return nil
}

// fields checks that n is a mapping of known keys and returns its values.
func (b *builder) fields(n *yaml.Node, what string, known map[string]bool) (map[string]*yaml.Node, error) {
	n = b.deref(n)
	if n.Kind != yaml.MappingNode {
		return nil, b.errf(n, "%s: a mapping expected", what)
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := b.deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, b.errf(k, "%s: a key that is not a string", what)
		}
		if !known[k.Value] {
			return nil, b.errf(k, "%s: unknown key %q", what, k.Value)
		}
		if _, dup := out[k.Value]; dup {
			return nil, b.errf(k, "%s: key %q given twice", what, k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

func (b *builder) deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func (b *builder) str(n *yaml.Node, what string) (string, error) {
	if n == nil {
		return "", nil
	}
	n = b.deref(n)
	if n.Kind != yaml.ScalarNode {
		return "", b.errf(n, "%s: a string expected", what)
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func (b *builder) boolean(n *yaml.Node, what string) (bool, error) {
	if n == nil {
		return false, nil
	}
	var v bool
	if err := b.deref(n).Decode(&v); err != nil {
		return false, b.errf(n, "%s: true or false expected", what)
	}
	return v, nil
}

var rootKeys = map[string]bool{"domain": true, "descriptors": true}

func (b *builder) domain(n *yaml.Node) error {
	f, err := b.fields(n, "config", rootKeys)
	if err != nil {
		return err
	}
	name, err := b.str(f["domain"], "domain")
	if err != nil {
		return err
	}
	if name == "" {
		return b.errf(n, "config file cannot have empty domain")
	}
	if _, dup := b.cfg.domains[name]; dup {
		return b.errf(f["domain"], "duplicate domain %q", name)
	}
	root := &node{children: map[string]*node{}}
	if err := b.descriptors(root, f["descriptors"], name+".", name, 1); err != nil {
		return err
	}
	b.cfg.domains[name] = root
	return nil
}

var descriptorKeys = map[string]bool{
	"key": true, "value": true, "descriptors": true, "rate_limit": true, "shadow_mode": true,
	"quota_mode": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true,
	"metadata": true,
}

func (b *builder) descriptors(parent *node, list *yaml.Node, prefix, domain string, depth int) error {
	if list == nil {
		return nil
	}
	list = b.deref(list)
	if isNull(list) {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return b.errf(list, "descriptors of %q: a list expected", strings.TrimSuffix(prefix, "."))
	}
	if depth > MaxDepth {
		return b.errf(list, "descriptors nested deeper than %d", MaxDepth)
	}
	for _, item := range list.Content {
		if err := b.descriptor(parent, item, prefix, domain, depth); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) descriptor(parent *node, item *yaml.Node, prefix, domain string, depth int) error {
	b.nodes++
	b.cfg.count++
	if b.cfg.count > descriptorBudget || b.nodes > maxNodes {
		return b.errf(item, "more than %d descriptors", descriptorBudget)
	}
	f, err := b.fields(item, "descriptor under "+strings.TrimSuffix(prefix, "."), descriptorKeys)
	if err != nil {
		return err
	}
	final, value, err := b.identity(item, f, prefix)
	if err != nil {
		return err
	}
	path := prefix + final
	if _, dup := parent.children[final]; dup {
		return b.errf(item, "duplicate descriptor composite key %q", path)
	}
	nd := &node{children: map[string]*node{}}
	if err := b.settings(nd, item, f, path, final, value); err != nil {
		return err
	}
	if strings.Contains(final, "*") {
		parent.wildcards = append(parent.wildcards, wildcard{key: final, parts: strings.Split(final, "*")})
	}
	if err := b.descriptors(nd, f["descriptors"], path+".", domain, depth+1); err != nil {
		return err
	}
	parent.children[final] = nd
	return nil
}

// identity returns a descriptor's "key_value" (or "key") and its value.
func (b *builder) identity(item *yaml.Node, f map[string]*yaml.Node, prefix string) (final, value string, err error) {
	key, err := b.str(f["key"], "key")
	if err != nil {
		return "", "", err
	}
	if key == "" {
		return "", "", b.errf(item, "descriptor under %q has empty key", strings.TrimSuffix(prefix, "."))
	}
	if value, err = b.str(f["value"], "value"); err != nil {
		return "", "", err
	}
	final = key
	if value != "" {
		final += "_" + value
	}
	return final, value, nil
}

// settings reads a descriptor's rate_limit and flags into nd.
func (b *builder) settings(nd *node, item *yaml.Node, f map[string]*yaml.Node, path, final, value string) error {
	var flags [5]bool
	var err error
	for i, k := range [...]string{"shadow_mode", "quota_mode", "detailed_metric", "share_threshold", "value_to_metric"} {
		if flags[i], err = b.boolean(f[k], path+": "+k); err != nil {
			return err
		}
	}
	if m := f["metadata"]; m != nil && b.deref(m).Kind != yaml.MappingNode {
		return b.errf(m, "%s: metadata: a mapping expected", path)
	}
	if rl := f["rate_limit"]; rl != nil && !isNull(b.deref(rl)) {
		if nd.limit, err = b.rateLimit(rl, path); err != nil {
			return err
		}
		nd.limit.Shadow, nd.limit.Quota, nd.limit.Detailed = flags[0], flags[1], flags[2]
	}
	if flags[3] {
		if !strings.Contains(final, "*") {
			return b.errf(item, "%s: share_threshold can only be used with wildcard values (containing '*')", path)
		}
		nd.share, nd.pattern = true, value
	}
	return nil
}

var rateLimitKeys = map[string]bool{"requests_per_unit": true, "unit": true, "unlimited": true, "name": true, "replaces": true}

func (b *builder) rateLimit(n *yaml.Node, path string) (*Limit, error) {
	f, err := b.fields(n, path+": rate_limit", rateLimitKeys)
	if err != nil {
		return nil, err
	}
	l := &Limit{Key: path}
	if l.Unlimited, err = b.boolean(f["unlimited"], path+": unlimited"); err != nil {
		return nil, err
	}
	unit, err := b.str(f["unit"], path+": unit")
	if err != nil {
		return nil, err
	}
	u, ok := unitNames[strings.ToLower(unit)]
	switch {
	case l.Unlimited && ok:
		return nil, b.errf(f["unit"], "%s: should not specify rate limit unit when unlimited", path)
	case !l.Unlimited && !ok:
		return nil, b.errf(n, "%s: invalid rate limit unit %q (second, minute, hour, day, week, month or year)", path, unit)
	}
	l.Unit = u
	if rpu := f["requests_per_unit"]; rpu != nil {
		s, err := b.str(rpu, path+": requests_per_unit")
		if err != nil {
			return nil, err
		}
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, b.errf(rpu, "%s: requests_per_unit %q: a whole number in [0, 4294967295] expected", path, s)
		}
		l.RequestsPerUnit = uint32(v)
	}
	if l.Name, err = b.str(f["name"], path+": name"); err != nil {
		return nil, err
	}
	if l.Replaces, err = b.replaces(f["replaces"], path, l.Name); err != nil {
		return nil, err
	}
	return l, nil
}

func (b *builder) replaces(rep *yaml.Node, path, own string) ([]string, error) {
	if rep == nil {
		return nil, nil
	}
	rep = b.deref(rep)
	if rep.Kind != yaml.SequenceNode {
		return nil, b.errf(rep, "%s: replaces: a list expected", path)
	}
	var out []string
	for _, r := range rep.Content {
		rf, err := b.fields(r, path+": replaces", map[string]bool{"name": true})
		if err != nil {
			return nil, err
		}
		name, err := b.str(rf["name"], path+": replaces: name")
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, b.errf(r, "%s: should not have an empty replaces entry", path)
		}
		if name == own {
			return nil, b.errf(r, "%s: replaces should not contain name of same descriptor", path)
		}
		out = append(out, name)
	}
	return out, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// Match finds the limit of one request descriptor of n entries (entry returns the i-th) the way
// envoyproxy/ratelimit's GetLimit does (src/config/config_impl.go): walk the
// domain's tree entry by entry, trying "key_value", then the level's
// wildcard entries in file order, then the key-only entry; the limit
// applies only when the request's last entry lands on a descriptor with a
// rate_limit (a request with more or fewer entries than the config's path
// gets none). shares holds, for each entry matched through a
// share_threshold wildcard, the pattern that replaces its value in the
// counter's key ("" for the others); nil when there is none.
func (c *Config) Match(domain string, n int, entry func(i int) (key, value string)) (lim *Limit, shares []string) {
	nd := c.domains[domain]
	if nd == nil {
		return nil, nil
	}
	var buf [128]byte
	for i := range n {
		key, value := entry(i)
		// key_value in a buffer on the stack: the lookup allocates nothing.
		full := append(append(append(buf[:0], key...), '_'), value...)
		next := nd.children[string(full)]
		if next == nil {
			for _, w := range nd.wildcards {
				if wildcardMatch(w.parts, string(full)) {
					next = nd.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = nd.children[key]
		}
		if next == nil {
			return nil, nil
		}
		if next.share {
			if shares == nil {
				shares = make([]string, n)
			}
			shares[i] = next.pattern
		}
		if i == n-1 {
			return next.limit, shares
		}
		if len(next.children) == 0 {
			return nil, nil
		}
		nd = next
	}
	return nil, nil
}

// wildcardMatch reports whether value matches a pattern split on "*", each
// "*" matching any run of bytes (as envoyproxy/ratelimit matches them).
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(value) < fixed {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
