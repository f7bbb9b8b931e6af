// Package surface holds the test that keeps the root module's public
// surface within its bar.
package surface

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// maxExported is the most exported identifiers the root module's public
// packages may have together. docs/design/architecture.md gives the reason
// for the bar and how it is counted.
const maxExported = 220

// method matches an exported method in `go doc -all` output.
var method = regexp.MustCompile(`(?m)^func \([a-zA-Z_]+ \*?[A-Z][A-Za-z0-9]*(\[[^]]*\])?\) [A-Z]`)

// TestExportedIdentifiers counts, for every public package of the root
// module (internal and examples excluded), the lines of `go doc -short`
// (one per exported const or var group, func, type and constructor) plus
// its exported methods, and fails if the total passes maxExported. It logs
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
		n := strings.Count(string(short), "\n") + len(method.FindAllIndex(all, -1))
		t.Logf("%-50s %4d", pkg, n)
		total += n
	}
	t.Logf("%-50s %4d (bar %d)", "total", total, maxExported)
	if total > maxExported {
		t.Errorf("the root module's public packages export %d identifiers, more than %d", total, maxExported)
	}
}
