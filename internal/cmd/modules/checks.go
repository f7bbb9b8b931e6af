package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modfileCopy copies module m's go.mod and go.sum to a folder of their own
// under the scratch space and returns the copy of go.mod, for -modfile: the
// go command then reads and writes the copies, and the tree stays as it is.
func (p *proxy) modfileCopy(m module, purpose string) (string, error) {
	dir := filepath.Join(p.tmp, purpose, filepath.FromSlash(m.Dir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(p.root, filepath.FromSlash(m.Dir), name))
		if errors.Is(err, os.ErrNotExist) && name == "go.sum" {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "go.mod"), nil
}

// withoutSiblings drops from go.sum data the lines of the repository's own
// modules. Their checksums are those of the release's tags, which do not
// exist while the release is prepared (and a module's go.sum is read only
// when it is the main module: a program that requires it checks its own).
func withoutSiblings(data []byte, prefix string) []byte {
	var out []byte
	for _, l := range strings.SplitAfter(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == prefix || strings.HasPrefix(f[0], prefix+"/")) {
			continue
		}
		out = append(out, l...)
	}
	return out
}

// tidy runs go mod tidy on a copy of each module's go.mod and go.sum and
// compares: go.mod must be the same, go.sum the same less the sluice
// modules' lines. With write, it writes both back instead.
func tidy(p *proxy, write bool) error {
	prefix := modulePath(p.mods)
	var untidy []string
	for _, m := range p.mods {
		fmt.Println("== tidy", m.Dir)
		modfile, err := p.modfileCopy(m, "tidy")
		if err != nil {
			return err
		}
		dir := filepath.Join(p.root, filepath.FromSlash(m.Dir))
		if _, err := goRun(dir, p.env, "mod", "tidy", "-modfile="+modfile); err != nil {
			return err
		}
		for _, name := range []string{"go.mod", "go.sum"} {
			got, err := os.ReadFile(filepath.Join(filepath.Dir(modfile), name))
			if errors.Is(err, os.ErrNotExist) && name == "go.sum" {
				got, err = nil, nil
			}
			if err != nil {
				return err
			}
			if name == "go.sum" {
				got = withoutSiblings(got, prefix)
			}
			target := filepath.Join(dir, name)
			have, err := os.ReadFile(target)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if string(have) == string(got) {
				continue
			}
			if write {
				if err := os.WriteFile(target, got, 0o644); err != nil {
					return err
				}
				fmt.Println("wrote", filepath.Join(m.Dir, name))
				continue
			}
			fmt.Print(lineDiff(filepath.Join(m.Dir, name), string(have), string(got)))
			untidy = append(untidy, m.Dir+"/"+name)
		}
	}
	if len(untidy) > 0 {
		return fmt.Errorf("not what go mod tidy makes them: %s; run: go run ./internal/cmd/modules tidy -w", strings.Join(untidy, ", "))
	}
	return nil
}

// lineDiff lists the lines only one of a and b has (enough for go.mod and
// go.sum, whose lines are unique).
func lineDiff(name, a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s (go mod tidy)\n", name, name)
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			fmt.Fprintf(&out, "-%s\n", l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			fmt.Fprintf(&out, "+%s\n", l)
		}
	}
	return out.String()
}

// stream runs the go command in dir with env, its output going to ours.
func stream(dir string, env []string, args ...string) error {
	cmd := exec.Command(goCmd(), args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("in %s: go %s: %w", dir, strings.Join(args, " "), err)
	}
	return nil
}

// standalone builds, vets and tests each module with GOWORK=off, its
// sibling modules coming from the proxy at the version it requires, as a
// program that requires the module builds it. The module's own files are
// used in place (tests may read the repository's documents); go.mod and
// go.sum are copies, which gain the sluice modules' checksums.
// A module that fails does not stop the others; the error lists them all.
func standalone(p *proxy, only []string, compile bool) error {
	var failed []string
	for _, m := range p.mods {
		if len(only) > 0 && !contains(only, m.Dir) {
			continue
		}
		// With compile, go vet (which type-checks every package with its
		// test files) stands for building the tests: linking every test
		// binary again took over three minutes of make test.
		steps := [][]string{{"build", "-o", os.DevNull, "./..."}, {"vet", "./..."}}
		what := "type-check the tests of"
		if !compile {
			steps = append(steps, []string{"test", "-count=1", "-timeout", "20m", "./..."})
			what = "test"
		}
		fmt.Printf("== GOWORK=off build, vet, %s %s (sluice modules at %s from a local proxy)\n", what, m.Dir, p.version)
		modfile, err := p.modfileCopy(m, "standalone")
		if err != nil {
			return err
		}
		dir := filepath.Join(p.root, filepath.FromSlash(m.Dir))
		// In GOFLAGS rather than on the command line, so that the go
		// commands a test runs (building a helper binary) use the copies too.
		env := append(append([]string(nil), p.env...), "GOFLAGS="+p.goflags+" -modfile="+modfile)
		if compile {
			if steps, err = compileSteps(dir, env); err != nil {
				fmt.Println(err)
				failed = append(failed, m.Dir)
				continue
			}
		}
		for _, args := range steps {
			if err := stream(dir, env, args...); err != nil {
				fmt.Println(err)
				failed = append(failed, m.Dir)
				break
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("standalone: %s failed", strings.Join(failed, ", "))
	}
	return nil
}

//go:embed testdata/consumer/main.go
var consumerMain []byte

// consumer is a user's module in a temporary folder outside the
// repository: it requires every published module at the version through
// go get, checks what it got (that version, each go.mod free of replace
// directives, which the go command ignores in a dependency but which would
// mean the module was only ever built with the repository around it), and
// runs a program that uses each of them. Then each runnable example of a
// published module is run by module path and version (go run pkg@version,
// which refuses a module whose go.mod replaces anything).
func consumer(p *proxy) error {
	dir := filepath.Join(p.tmp, "consumer")
	if rel, err := filepath.Rel(p.root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return fmt.Errorf("the consumer's folder %s is inside the repository", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/consumer\n\ngo 1.24\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), consumerMain, 0o644); err != nil {
		return err
	}
	get := []string{"get"}
	want := map[string]bool{}
	for _, m := range p.mods {
		if m.published() {
			get = append(get, m.Path+"@"+p.version)
			want[m.Path] = true
		}
	}
	fmt.Printf("== consumer: go %s\n", strings.Join(get, " "))
	if _, err := goRun(dir, p.env, get...); err != nil {
		return err
	}
	if _, err := goRun(dir, p.env, "mod", "tidy"); err != nil {
		return err
	}
	out, err := goRun(dir, p.env, "list", "-m", "-json", "all")
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var problems []string
	for dec.More() {
		var mod struct {
			Path, Version, GoMod string
			Replace              *struct{}
		}
		if err := dec.Decode(&mod); err != nil {
			return err
		}
		if !want[mod.Path] {
			continue
		}
		delete(want, mod.Path)
		if mod.Version != p.version || mod.Replace != nil {
			problems = append(problems, fmt.Sprintf("%s resolved to %s, want %s", mod.Path, mod.Version, p.version))
			continue
		}
		edit, err := goRun(dir, p.env, "mod", "edit", "-json", mod.GoMod)
		if err != nil {
			return err
		}
		var f struct {
			Replace []struct {
				Old, New struct{ Path, Version string }
			}
		}
		if err := json.Unmarshal(edit, &f); err != nil {
			return err
		}
		for _, r := range f.Replace {
			problems = append(problems, fmt.Sprintf("%s@%s: go.mod replaces %s with %s %s", mod.Path, mod.Version, r.Old.Path, r.New.Path, r.New.Version))
		}
	}
	for path := range want {
		problems = append(problems, path+" is not in the consumer's module graph")
	}
	if len(problems) > 0 {
		return fmt.Errorf("published modules a user cannot depend on as they are:\n  %s", strings.Join(problems, "\n  "))
	}
	fmt.Println("== consumer: go run .")
	if err := stream(dir, p.env, "run", "."); err != nil {
		return err
	}
	for _, m := range p.mods {
		main := filepath.Join(p.root, filepath.FromSlash(m.Dir), "example", "main.go")
		if _, err := os.Stat(main); !m.published() || err != nil {
			continue
		}
		pkg := m.Path + "/example@" + p.version
		fmt.Println("== consumer: go run", pkg)
		if err := stream(dir, p.env, "run", pkg); err != nil {
			return err
		}
	}
	return nil
}

// release makes every module require its siblings at v, drops the
// siblings' replace directives, and tidies go.mod and go.sum against the
// tree served at v.
func release(root string, mods []module, v string) error {
	if !semver.MatchString(v) {
		return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH (with an optional -prerelease)", v)
	}
	if !strings.HasPrefix(v, "v0.") && !strings.HasPrefix(v, "v1.") {
		return fmt.Errorf("version %s: a major version from v2 on changes every module path (/v2), which this command does not do", v)
	}
	for _, m := range mods {
		args := []string{"mod", "edit"}
		for _, s := range m.Siblings {
			args = append(args, "-require="+s+"@"+v)
		}
		for _, s := range m.Replaces {
			args = append(args, "-dropreplace="+s)
		}
		if len(args) == 2 {
			continue
		}
		if _, err := goRun(root, nil, append(args, filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"))...); err != nil {
			return err
		}
	}
	mods, err := loadModules(root)
	if err != nil {
		return err
	}
	if err := workReplaces(root, mods, v); err != nil {
		return err
	}
	if err := withProxy(root, mods, func(p *proxy) error { return tidy(p, true) }); err != nil {
		return err
	}
	// Tidying may have dropped requirements, and so changed the order.
	if mods, err = loadModules(root); err != nil {
		return err
	}
	fmt.Printf("\nThe modules require each other at %s. Next: make test, commit, then\n\n\tmake release-tags VERSION=%s\n\n", v, v)
	return tags(root, mods, v, false)
}

// workReplaces makes go.work replace each module another requires, at
// version v, with its folder: in workspace mode the module graph still
// reads the go.mod of every version required, and v may not be published
// yet. Replaces of those modules at other versions go.
func workReplaces(root string, mods []module, v string) error {
	out, err := goRun(root, nil, "work", "edit", "-json")
	if err != nil {
		return err
	}
	var work struct {
		Replace []struct {
			Old struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &work); err != nil {
		return err
	}
	required := map[string]bool{}
	for _, m := range mods {
		for _, s := range m.Siblings {
			required[s] = true
		}
	}
	args := []string{"work", "edit"}
	have := map[string]bool{}
	for _, r := range work.Replace {
		for _, m := range mods {
			if r.Old.Path == m.Path && r.Old.Version == v && required[m.Path] {
				have[m.Path] = true
			} else if r.Old.Path == m.Path && r.Old.Version != "" {
				args = append(args, "-dropreplace="+r.Old.Path+"@"+r.Old.Version)
			}
		}
	}
	for _, m := range mods {
		if required[m.Path] && !have[m.Path] {
			args = append(args, "-replace="+m.Path+"@"+v+"=./"+strings.TrimPrefix(m.Dir, "."))
		}
	}
	if len(args) == 2 {
		return nil
	}
	_, err = goRun(root, nil, args...)
	return err
}

// tags prints the release tags of v for the published modules, a module
// after the siblings it requires, and with create makes them (annotated,
// on HEAD, which must be clean and require v).
func tags(root string, mods []module, v string, create bool) error {
	have, err := version(mods)
	if err != nil {
		return err
	}
	if have != v {
		return fmt.Errorf("the modules require each other at %s, not %s: make release VERSION=%s first", have, v, v)
	}
	var pub []module
	var names []string
	for _, m := range mods {
		if m.published() {
			pub = append(pub, m)
			names = append(names, m.tag(v))
		}
	}
	if create {
		cmd := exec.Command("git", "status", "--porcelain")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return err
		}
		if len(out) > 0 {
			return fmt.Errorf("the work tree has changes; commit them first:\n%s", out)
		}
		for i, name := range names {
			cmd := exec.Command("git", "tag", "-a", name, "-m", pub[i].Path+" "+v)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("git tag %s: %w\n%s", name, err, out)
			}
			fmt.Println("tagged", name)
		}
		fmt.Printf("\nPush them in this order (one push is fine too):\n\n\tgit push origin %s\n", strings.Join(names, " "))
		return nil
	}
	fmt.Println("Tags, in order (a module after the ones it requires):")
	for _, n := range names {
		fmt.Println("\t" + n)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
