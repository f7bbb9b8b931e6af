package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadExamples(t *testing.T) {
	for _, p := range []string{"../testdata/example.yaml", "../testdata/mongo.yaml", "../testdata/readme.yaml", "../testdata/integration"} {
		c, err := Load(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(c.Domains()) == 0 || c.Descriptors() == 0 {
			t.Fatalf("%s: %d domains, %d descriptors", p, len(c.Domains()), c.Descriptors())
		}
	}
	c, err := Load("../testdata/integration")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "another,basic,share-threshold-test" {
		t.Fatalf("folder domains: %s", got)
	}
}

// Every refusal names the file, the line and what is wrong, as
// envoyproxy/ratelimit refuses them (src/config/config_impl.go).
func TestErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    bogus: 1\n", `test.yaml:5: descriptor under d: unknown key "bogus"`},
		{"domain: d\nbogus: 1\n", `test.yaml:2: config: unknown key "bogus"`},
		{"descriptors: []\n", "config file cannot have empty domain"},
		{"domain: d\ndescriptors:\n  - value: v\n", `test.yaml:3: descriptor under "d" has empty key`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: secs, requests_per_unit: 1}\n", `d.a: invalid rate limit unit "secs"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", `d.a: invalid rate limit unit ""`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `requests_per_unit "-1"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "requests_per_unit"},
		{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", `duplicate descriptor composite key "d.a"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, name: n, replaces: [{name: n}]}\n", "replaces should not contain name of same descriptor"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, replaces: [{name: ''}]}\n", "should not have an empty replaces entry"},
		{"domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n", "share_threshold can only be used with wildcard values"},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", "shadow_mode: true or false expected"},
		{"domain: d\ndescriptors: 3\n", "a list expected"},
		{"domain: d\n---\ndomain: d\n", `duplicate domain "d"`},
		{"domain: [d]\n", "domain: a string expected"},
		{"domain: d\ndescriptors: [\n", "invalid YAML"},
		{"", "empty config file"},
	} {
		_, err := Parse("test.yaml", []byte(c.yaml))
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
}

func TestConfigBounds(t *testing.T) {
	var deep strings.Builder
	deep.WriteString("domain: d\ndescriptors:\n")
	for i := range MaxDepth + 1 {
		ind := strings.Repeat("  ", 2*i)
		deep.WriteString(ind + "  - key: k\n" + ind + "    descriptors:\n")
	}
	if _, err := Parse("deep.yaml", []byte(deep.String())); err == nil || !strings.Contains(err.Error(), "deeper than") {
		t.Fatalf("deep: %v", err)
	}
	if _, err := Parse("big.yaml", make([]byte, MaxBytes+1)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big: %v", err)
	}
	// A billion laughs: each level's descriptors are eight aliases of the
	// level below; walked where used, they are bounded by MaxDescriptors
	// (lowered here: reading 100,000 descriptors takes seconds).
	descriptorBudget = 2000
	defer func() { descriptorBudget = MaxDescriptors }()
	var bomb strings.Builder
	bomb.WriteString("domain: d\ndescriptors:\n  - key: l0\n    descriptors: &l0 [{key: k}]\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&bomb, "  - key: l%d\n    descriptors: &l%d [", i, i)
		for j := range 8 {
			fmt.Fprintf(&bomb, "{key: k%d, descriptors: *l%d},", j, i-1)
		}
		bomb.WriteString("]\n")
	}
	if _, err := Parse("laughs.yaml", []byte(bomb.String())); err == nil ||
		!strings.Contains(err.Error(), "descriptors") && !strings.Contains(err.Error(), "alias") {
		t.Fatalf("alias bomb: %v", err)
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big file: %v", err)
	}
}

// A folder is read whole: one bad file refuses the whole folder, a domain
// given in two files is refused, files other than .yaml/.yml are ignored.
func TestLoadFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	write("b.yml", "domain: b\n")
	write("notes.txt", "not yaml: [")
	if c, err := Load(dir); err != nil || strings.Join(c.Domains(), ",") != "a,b" {
		t.Fatalf("folder: %v %v", c, err)
	}
	write("c.yaml", "domain: a\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `c.yaml:1: duplicate domain "a"`) {
		t.Fatalf("duplicate across files: %v", err)
	}
}

// FuzzParse: any input is refused or loaded, never a panic, and a
// loaded config answers matches.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../testdata/example.yaml", "../testdata/readme.yaml", "../testdata/integration/share_threshold.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: 'a*b*', rate_limit: {unit: day, requests_per_unit: 1}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, d := range c.Domains() {
			c.Match(d, 2, func(i int) (string, string) { return "k", []string{"ab", "v"}[i] })
		}
	})
}
