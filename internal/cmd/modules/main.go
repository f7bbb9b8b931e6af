// Command modules releases the repository's modules and checks them as a
// user gets them: from a module proxy, at a version, without go.work.
//
//	go run ./internal/cmd/modules <command>
//
// The published go.mod files require their sibling modules at the version
// being prepared (the one release last wrote) and replace none. The checks
// serve the working tree's modules at that version from a module proxy in a
// temporary directory (GOPROXY=file://DIR, then the configured proxy for
// everything else; GONOSUMDB for the sluice modules, whose checksums no
// database holds yet). docs/releasing.md describes the scheme.
//
// Commands:
//
//	version             print the version the go.mod files require
//	tidy [-w]           each module's go.mod and go.sum are what go mod tidy
//	                    makes them (-w: write them)
//	standalone [DIR...] each module (or those in the folders named) built,
//	                    vetted and tested with GOWORK=off
//	consumer            a module outside the repository requires every
//	                    published module and runs a program against them
//	release VERSION     require VERSION everywhere, drop sibling replaces, tidy
//	tags [-create] VERSION
//	                    print (or create) the release tags, dependencies first
//	proxy DIR           write the proxy to DIR and print the environment
//	copies [-w]         the generated copies of the root module's internal
//	                    files in other modules equal their source (-w: write
//	                    them)
//	internal            no module imports another module's internal package
//	standalone -compile [DIR...]
//	                    the same, the tests built but not run
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	root, err := repoRoot()
	if err == nil {
		err = run(root, os.Args[1], os.Args[2:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modules:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./internal/cmd/modules version|tidy [-w]|standalone [DIR...]|consumer|release VERSION|tags [-create] VERSION|proxy DIR|copies [-w]|internal|standalone -compile")
	os.Exit(2)
}

func run(root, cmd string, args []string) error {
	mods, err := loadModules(root)
	if err != nil {
		return err
	}
	fl := flag.NewFlagSet(cmd, flag.ExitOnError)
	write := fl.Bool("w", false, "write go.mod and go.sum (tidy), or the copies (copies)")
	create := fl.Bool("create", false, "create the tags")
	compile := fl.Bool("compile", false, "build the tests without running them (standalone)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	args = fl.Args()
	switch cmd {
	case "version":
		v, err := version(mods)
		if err == nil {
			fmt.Println(v)
		}
		return err
	case "tidy":
		return withProxy(root, mods, func(p *proxy) error { return tidy(p, *write) })
	case "standalone":
		return withProxy(root, mods, func(p *proxy) error { return standalone(p, args, *compile) })
	case "consumer":
		return withProxy(root, mods, consumer)
	case "release":
		if len(args) != 1 {
			usage()
		}
		return release(root, mods, args[0])
	case "tags":
		if len(args) != 1 {
			usage()
		}
		return tags(root, mods, args[0], *create)
	case "copies":
		return syncCopies(root, *write)
	case "internal":
		return checkInternal(root, mods)
	case "proxy":
		if len(args) != 1 {
			usage()
		}
		v, err := version(mods)
		if err != nil {
			return err
		}
		dir, err := filepath.Abs(args[0])
		if err != nil {
			return err
		}
		p, err := newProxy(root, mods, v, dir)
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(p.env[len(os.Environ()):], "\n"))
		return nil
	}
	usage()
	return nil
}

// module is one go.mod of the repository.
type module struct {
	Dir      string   // relative to the repository root, slash-separated; "." for the root
	Path     string   // module path
	Siblings []string // paths of the repository's modules it requires
	Versions []string // the versions it requires them at, in the same order
	Replaces []string // the repository's modules it replaces
}

// published reports whether m is a module users depend on (examples are
// not released).
func (m module) published() bool {
	return m.Dir != "examples" && !strings.HasPrefix(m.Dir, "examples/")
}

// tag is m's release tag for version v: the root's is v, a sub-module's is
// prefixed with its folder (the Go modules reference, "Mapping versions to
// commits").
func (m module) tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

func repoRoot() (string, error) {
	out, err := exec.Command(goCmd(), "list", "-m", "-f", "{{.Dir}}", "github.com/sluice-go/sluice").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root (run from inside it): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func goCmd() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// loadModules finds every go.mod under root (hidden folders and testdata
// left out) and reads it with go mod edit -json, in dependency order:
// a module comes after the siblings it requires.
func loadModules(root string) ([]module, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	type modFile struct {
		Module  struct{ Path string }
		Require []struct{ Path, Version string }
		Replace []struct{ Old struct{ Path string } }
	}
	files := map[string]modFile{}
	paths := map[string]bool{}
	for _, d := range dirs {
		out, err := exec.Command(goCmd(), "mod", "edit", "-json", filepath.Join(root, d, "go.mod")).Output()
		if err != nil {
			return nil, fmt.Errorf("%s/go.mod: %w", d, err)
		}
		var f modFile
		if err := json.Unmarshal(out, &f); err != nil {
			return nil, fmt.Errorf("%s/go.mod: %w", d, err)
		}
		files[d] = f
		paths[f.Module.Path] = true
	}
	var mods []module
	for _, d := range dirs {
		f := files[d]
		m := module{Dir: d, Path: f.Module.Path}
		for _, r := range f.Require {
			if paths[r.Path] {
				m.Siblings = append(m.Siblings, r.Path)
				m.Versions = append(m.Versions, r.Version)
			}
		}
		for _, r := range f.Replace {
			if paths[r.Old.Path] {
				m.Replaces = append(m.Replaces, r.Old.Path)
			}
		}
		mods = append(mods, m)
	}
	return depOrder(mods)
}

// depOrder sorts mods so that each comes after the siblings it requires
// (ties by folder), or fails on a cycle.
func depOrder(mods []module) ([]module, error) {
	sort.Slice(mods, func(i, j int) bool { return mods[i].Dir < mods[j].Dir })
	done := map[string]bool{}
	var out []module
	for len(out) < len(mods) {
		progress := false
		for _, m := range mods {
			if done[m.Path] {
				continue
			}
			ready := true
			for _, s := range m.Siblings {
				ready = ready && done[s]
			}
			if ready {
				done[m.Path] = true
				out = append(out, m)
				progress = true
			}
		}
		if !progress {
			return nil, errors.New("the modules require each other in a cycle")
		}
	}
	return out, nil
}

// version is the one version at which the modules require their siblings.
func version(mods []module) (string, error) {
	seen := map[string][]string{}
	for _, m := range mods {
		for i, s := range m.Siblings {
			seen[m.Versions[i]] = append(seen[m.Versions[i]], m.Dir+" requires "+s)
		}
	}
	if len(seen) != 1 {
		var lines []string
		for v, who := range seen {
			lines = append(lines, v+": "+strings.Join(who, ", "))
		}
		sort.Strings(lines)
		return "", fmt.Errorf("the modules must require their siblings at one version (make release VERSION=...), found:\n  %s", strings.Join(lines, "\n  "))
	}
	for v := range seen {
		if !semver.MatchString(v) || strings.HasPrefix(v, "v0.0.0") {
			return "", fmt.Errorf("sibling modules are required at %s: want a release version vX.Y.Z (make release VERSION=...)", v)
		}
		return v, nil
	}
	panic("unreachable")
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// goRun runs the go command in dir with env (nil: the process's) and
// returns its combined output, which it also copies to stdout when verbose.
func goRun(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(goCmd(), args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("in %s: go %s: %w\n%s", dir, strings.Join(args, " "), err, out.Bytes())
	}
	return out.Bytes(), nil
}
