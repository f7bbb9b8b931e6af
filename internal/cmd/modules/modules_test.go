package main

import (
	"reflect"
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
