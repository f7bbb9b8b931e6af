package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestZipFiles: the module zip rules leave out nested modules (a folder
// with a go.mod, testdata included), version-control folders and vendored
// packages, and keep the rest, sorted.
func TestZipFiles(t *testing.T) {
	got := zipFiles([]string{
		"z.go", "go.mod", "a/a.go",
		"adapters/gin/go.mod", "adapters/gin/gin.go", "adapters/http/http.go",
		"testdata/mod/go.mod", "testdata/mod/x.go", "testdata/rules.yaml",
		".git/config", "a/.hg/x", "vendor/modules.txt", "vendor/x/y.go",
	})
	want := []string{"a/a.go", "adapters/http/http.go", "go.mod", "testdata/rules.yaml", "vendor/modules.txt", "z.go"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("zipFiles = %q\nwant %q", got, want)
	}
}

// TestDepOrder: a module comes after the siblings it requires; ties by
// folder; a cycle is an error.
func TestDepOrder(t *testing.T) {
	mods := []module{
		{Dir: "dashboard", Path: "m/dashboard", Siblings: []string{"m", "m/cluster/redis"}},
		{Dir: "cluster/redis", Path: "m/cluster/redis", Siblings: []string{"m"}},
		{Dir: "adapters/gin", Path: "m/adapters/gin", Siblings: []string{"m"}},
		{Dir: ".", Path: "m"},
	}
	got, err := depOrder(mods)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range got {
		dirs = append(dirs, m.tag("v1.2.3"))
	}
	want := []string{"v1.2.3", "adapters/gin/v1.2.3", "cluster/redis/v1.2.3", "dashboard/v1.2.3"}
	if !reflect.DeepEqual(dirs, want) {
		t.Fatalf("tags in order = %q, want %q", dirs, want)
	}
	if _, err := depOrder([]module{{Dir: "a", Path: "a", Siblings: []string{"b"}}, {Dir: "b", Path: "b", Siblings: []string{"a"}}}); err == nil {
		t.Fatal("a cycle was ordered")
	}
}

// TestWithoutSiblings drops the repository's modules' lines from go.sum
// and nothing else (a path that only starts like the root's stays).
func TestWithoutSiblings(t *testing.T) {
	in := "github.com/a/b v1.0.0 h1:x=\n" +
		"github.com/sluice-go/sluice v0.1.0 h1:y=\n" +
		"github.com/sluice-go/sluice v0.1.0/go.mod h1:z=\n" +
		"github.com/sluice-go/sluice/cluster/redis v0.1.0/go.mod h1:w=\n" +
		"github.com/sluice-go/sluicex v1.0.0 h1:v=\n"
	want := "github.com/a/b v1.0.0 h1:x=\ngithub.com/sluice-go/sluicex v1.0.0 h1:v=\n"
	if got := string(withoutSiblings([]byte(in), "github.com/sluice-go/sluice")); got != want {
		t.Fatalf("withoutSiblings = %q, want %q", got, want)
	}
}

// TestVersion: one release version, or an error naming who requires what.
func TestVersion(t *testing.T) {
	m := func(v string) module {
		return module{Dir: "x", Siblings: []string{"m"}, Versions: []string{v}}
	}
	if v, err := version([]module{m("v0.1.0"), m("v0.1.0")}); err != nil || v != "v0.1.0" {
		t.Fatalf("version = %q, %v", v, err)
	}
	for _, bad := range [][]module{{m("v0.1.0"), m("v0.2.0")}, {m("v0.0.0")}, {m("v0.0.0-20250101000000-abcdefabcdef")}, {}} {
		if v, err := version(bad); err == nil {
			t.Errorf("version(%v) = %q, want an error", bad, v)
		}
	}
}

// TestInternalImports: an import of another module's internal package is
// found (in a test file too), one of the module's own internal packages or
// of another module's public package is not, and nested modules' files
// count as theirs.
func TestInternalImports(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"a.go":                        `package m; import _ "m/internal/x"`,
		"internal/x/x.go":             `package x; import _ "m/sub/internal/y"`,
		"sub/s.go":                    `package sub; import _ "m/sub/internal/y"; import _ "m/pub"`,
		"sub/s_test.go":               `package sub; import _ "m/internal/x"`,
		"sub/internal/y/y.go":         `package y`,
		"sub/testdata/t.go":           `package t; import _ "m/internal/x"`,
		"other/internal/z/z.go":       `package z; import _ "m/internal/x"`,
		"other/internal/z/z_wrong.go": `package z; import _ "m/sub/internal/y/deeper"`,
		"other/go.mod":                "module m/other\n",
		"pub/p.go":                    `package pub`,
	}
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mods := []module{{Dir: ".", Path: "m"}, {Dir: "sub", Path: "m/sub"}, {Dir: "other", Path: "m/other"}}
	got, err := internalImports(root, mods)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"internal/x/x.go: imports m/sub/internal/y, internal to module m/sub",
		"other/internal/z/z.go: imports m/internal/x, internal to module m",
		"other/internal/z/z_wrong.go: imports m/sub/internal/y/deeper, internal to module m/sub",
		"sub/s_test.go: imports m/internal/x, internal to module m",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("internalImports =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCopies: every copy is its source under the generated-code header
// (what make test checks with copies), and the header is one Go tools
// read as generated.
func TestCopies(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	if err := syncCopies(root, false); err != nil {
		t.Fatal(err)
	}
	if !generated.MatchString(copyHeader) {
		t.Fatalf("header %q is not a generated-code comment", copyHeader)
	}
}

// generated is the comment by which Go tools know generated files
// (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)
