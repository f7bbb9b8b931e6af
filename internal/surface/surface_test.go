// Package surface holds the test that keeps the root module's public
// surface within its bar.
package surface

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxExported is the most exported identifiers the root module's public
// packages may have together. docs/design/architecture.md gives the reason
// for the bar and how it is counted.
const maxExported = 218

// method matches an exported method in `go doc -all` output.
var method = regexp.MustCompile(`(?m)^func \([a-zA-Z_]+ \*?[A-Z][A-Za-z0-9]*(\[[^]]*\])?\) [A-Z]`)

// alias matches a public name given to a type of the root module's
// internal/core package (vocabulary.go), whose methods go doc does not list
// under the alias.
var alias = regexp.MustCompile(`(?m)^type ([A-Z][A-Za-z0-9]*) = core\.([A-Z][A-Za-z0-9]*)$`)

// aliasMethods is the count of exported methods of the internal types that
// a package's `go doc -all` output names by alias: they are part of the
// public surface as much as methods declared in the package.
func aliasMethods(t *testing.T, all []byte) int {
	t.Helper()
	m := alias.FindAllSubmatch(all, -1)
	if len(m) == 0 {
		return 0
	}
	core, err := exec.Command("go", "doc", "-all", "github.com/sluice-go/sluice/internal/core").Output()
	if err != nil {
		t.Fatalf("go doc -all internal/core: %v", err)
	}
	n := 0
	for _, a := range m {
		of := regexp.MustCompile(`(?m)^func \([a-zA-Z_]+ \*?` + string(a[2]) + `\) [A-Z]`)
		n += len(of.FindAllIndex(core, -1))
	}
	return n
}

// TestExportedIdentifiers counts, for every public package of the root
// module (internal and examples excluded), the lines of `go doc -short`
// (one per exported const or var group, func, type and constructor) plus
// its exported methods (those of the internal types it names by alias
// included), and fails if the total passes maxExported. It logs
// the count per package, so `go test -v ./internal/surface/` prints them.
func TestExportedIdentifiers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go doc for every package; not in -short")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Module.Path}}", "github.com/sluice-go/sluice/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, mod, _ := strings.Cut(line, " ")
		if mod != "github.com/sluice-go/sluice" || strings.Contains(pkg, "/internal") || strings.Contains(pkg, "/examples") {
			continue
		}
		short, err := exec.Command("go", "doc", "-short", pkg).Output()
		if err != nil {
			t.Fatalf("go doc -short %s: %v", pkg, err)
		}
		all, err := exec.Command("go", "doc", "-all", pkg).Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", pkg, err)
		}
		n := strings.Count(string(short), "\n") + len(method.FindAllIndex(all, -1)) + aliasMethods(t, all)
		t.Logf("%-50s %4d", pkg, n)
		total += n
	}
	t.Logf("%-50s %4d (bar %d)", "total", total, maxExported)
	if total > maxExported {
		t.Errorf("the root module's public packages export %d identifiers, more than %d", total, maxExported)
	}
}

// maxRulesLines is the most non-test lines the rules package may have: the
// rule types, their validation and the decoder and encoder of rule
// documents (docs/design/architecture.md, "The public surface").
const maxRulesLines = 2130

// maxLineChars is the longest a non-test line of the rules package may be,
// in characters (a tab is one): a line bar is only a bar if lines cannot
// grow instead.
const maxLineChars = 120

// TestRulesPackageLines counts every line of the rules package's non-test
// files, doc comments and "// complexity:" lines included, and fails past
// maxRulesLines or on a line longer than maxLineChars.
func TestRulesPackageLines(t *testing.T) {
	files, err := filepath.Glob("../../rules/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rules files: %v", err)
	}
	total := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(b, []byte("\n"))
		for i, line := range strings.Split(string(b), "\n") {
			if n := utf8.RuneCountInString(line); n > maxLineChars {
				t.Errorf("%s:%d: %d characters, more than %d", filepath.Base(f), i+1, n, maxLineChars)
			}
		}
	}
	t.Logf("rules: %d non-test lines (bar %d)", total, maxRulesLines)
	if total > maxRulesLines {
		t.Errorf("the rules package has %d non-test lines, more than %d", total, maxRulesLines)
	}
}
