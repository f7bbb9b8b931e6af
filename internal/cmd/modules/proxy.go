package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// proxy is a file-based module proxy serving the working tree's modules at
// one version, and the environment of go commands that use it.
type proxy struct {
	root    string
	mods    []module
	version string
	dir     string   // the proxy's folder
	tmp     string   // scratch space of the checks
	env     []string // os.Environ() and the variables below
	goflags string   // GOFLAGS of env
}

// withProxy serves the modules at the version their go.mod files require
// from a temporary proxy while f runs. The module cache keeps what it
// downloads by module and version only, so the sluice modules it holds
// (a previous tree served at the same version) are removed before and
// after: the checks see the tree as it is, and nothing of it outlives them.
func withProxy(root string, mods []module, f func(*proxy) error) (err error) {
	v, err := version(mods)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sluice-modules-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	unlock, err := lockCache()
	if err != nil {
		return err
	}
	defer unlock()
	if err := purgeCache(mods, v); err != nil {
		return err
	}
	defer func() {
		if perr := purgeCache(mods, v); err == nil {
			err = perr
		}
	}()
	p, err := newProxy(root, mods, v, filepath.Join(tmp, "proxy"))
	if err != nil {
		return err
	}
	p.tmp = tmp
	return f(p)
}

// newProxy writes the proxy of mods at version v to dir.
func newProxy(root string, mods []module, v, dir string) (*proxy, error) {
	p := &proxy{root: root, mods: mods, version: v, dir: dir}
	for _, m := range mods {
		if err := p.write(m); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Dir, err)
		}
	}
	goenv := func(name string) string {
		out, _ := exec.Command(goCmd(), "env", name).Output()
		return strings.TrimSpace(string(out))
	}
	join := func(a, b, sep string) string {
		if a == "" {
			return b
		}
		return a + sep + b
	}
	p.goflags = join(goenv("GOFLAGS"), "-mod=mod", " ")
	p.env = append(os.Environ(),
		"GOWORK=off",
		// The local versions first; every other module from the proxy
		// the go command is configured with.
		"GOPROXY=file://"+filepath.ToSlash(dir)+","+goenv("GOPROXY"),
		// No checksum database knows the local versions.
		"GONOSUMDB="+join(goenv("GONOSUMDB"), modulePath(mods), ","),
		// go.sum gains the sluice modules' lines in copies only (see tidy).
		"GOFLAGS="+p.goflags,
		// The go command's module index (in the build cache) keeps the
		// file list of a module version it read once; the local versions
		// change under the same version with the tree, and an index from
		// an earlier run named files that were no longer there (or missed
		// new ones: "undefined" in a standalone build).
		"GODEBUG="+join(os.Getenv("GODEBUG"), "goindex=0", ","),
	)
	return p, nil
}

// modulePath is the root module's path, a prefix of every other's.
func modulePath(mods []module) string {
	for _, m := range mods {
		if m.Dir == "." {
			return m.Path
		}
	}
	panic("no root module")
}

// write adds module m to the proxy: @v/list, .info, .mod and .zip.
func (p *proxy) write(m module) error {
	if strings.ToLower(m.Path) != m.Path {
		return fmt.Errorf("module path %s needs case-escaping, which this proxy does not do", m.Path)
	}
	vdir := filepath.Join(p.dir, filepath.FromSlash(m.Path), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	dir := filepath.Join(p.root, filepath.FromSlash(m.Dir))
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	files, err := moduleFiles(p.root, m.Dir)
	if err != nil {
		return err
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		w, err := zw.Create(m.Path + "@" + p.version + "/" + f)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	info, _ := json.Marshal(struct{ Version, Time string }{p.version, "2000-01-01T00:00:00Z"})
	for name, data := range map[string][]byte{
		"list":              []byte(p.version + "\n"),
		p.version + ".info": info,
		p.version + ".mod":  gomod,
		p.version + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleFiles lists the files of the module in folder dir of the
// repository at root, as the module's zip holds them (slash-separated,
// relative to dir, sorted): the files git tracks or would add (ignored ones
// left out; every file when root is not a git work tree) as they are on
// disk, less what the module zip rules leave out.
func moduleFiles(root, dir string) ([]string, error) {
	abs := filepath.Join(root, filepath.FromSlash(dir))
	var candidates []string
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = abs
	if out, err := cmd.Output(); err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				candidates = append(candidates, f)
			}
		}
	} else {
		err := filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(abs, p)
			candidates = append(candidates, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var regular []string
	for _, f := range candidates {
		// Deleted but still tracked, or not a regular file: not in a zip.
		if fi, err := os.Lstat(filepath.Join(abs, filepath.FromSlash(f))); err == nil && fi.Mode().IsRegular() {
			regular = append(regular, f)
		}
	}
	return zipFiles(regular), nil
}

// zipFiles applies the module zip rules (golang.org/x/mod/zip) to the
// module's regular files: a folder with a go.mod of its own is another
// module and is left out with everything below it, as are version-control
// folders and vendored packages.
func zipFiles(files []string) []string {
	nested := map[string]bool{}
	for _, f := range files {
		if path.Base(f) == "go.mod" && f != "go.mod" {
			nested[path.Dir(f)] = true
		}
	}
	var out []string
next:
	for _, f := range files {
		parts := strings.Split(f, "/")
		for i, part := range parts[:len(parts)-1] {
			switch part {
			case ".git", ".hg", ".svn", ".bzr":
				continue next
			case "vendor":
				if !(i == 0 && len(parts) == 2 && parts[1] == "modules.txt") {
					continue next
				}
			}
			if nested[strings.Join(parts[:i+1], "/")] {
				continue next
			}
		}
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// purgeCache removes the sluice modules at version v from the module
// cache (which makes its files read-only): the extracted folders and the
// downloaded .info, .mod and .zip.
func purgeCache(mods []module, v string) error {
	out, err := exec.Command(goCmd(), "env", "GOMODCACHE").Output()
	if err != nil {
		return err
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" {
		return nil
	}
	for _, m := range mods {
		// Module paths here are lowercase: their cache paths need no escaping.
		extracted := filepath.Join(cache, filepath.FromSlash(m.Path)+"@"+v)
		_ = filepath.WalkDir(extracted, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(extracted); err != nil {
			return err
		}
		dl := filepath.Join(cache, "cache", "download", filepath.FromSlash(m.Path), "@v")
		for _, ext := range []string{".info", ".mod", ".zip", ".ziphash", ".partial", ".lock"} {
			if err := os.Remove(filepath.Join(dl, v+ext)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}
