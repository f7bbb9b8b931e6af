package doccheck

// The documents' Go code, compiled.
//
// TestCodeBlocksCompile takes every fenced block whose info string starts
// with the word "go" (```go) from README.md and docs/ (subfolders included) and compiles it
// with go build and go vet against this repository, in a temporary module that requires
// the root module and every library module of the repository (the adapters
// with a go.mod of their own) and replaces them with their folders here. It
// runs offline when the module cache holds the modules those need (make
// test's earlier steps fetch them) and needs no network otherwise. Blocks in
// any other fence (```sh, ```yaml, ```text, a bare ```) are not compiled:
// use one of those for output, pseudo-code or another language.
//
// How a block becomes a Go file:
//
//   - A block that starts with a package clause (after comments) is a whole
//     file and is compiled as it is, in a package of its own.
//   - Otherwise, its leading import declarations (if any) are kept at file
//     level, and the rest is either a list of declarations (types, funcs,
//     vars: it parses as such) placed at file level, or statements placed in
//     the body of `func _() (_ error)`. So a fragment may `return` bare or
//     return an error, as a handler or a function returning error would.
//   - A fragment need not import what it uses: a name of the packages below,
//     used and not declared by the block, is imported by that name.
//     Standard library: context, errors, fmt, io, log, math, net, http
//     (net/http), netip, os, slog (log/slog), strconv, strings, sync, time. This repository: every
//     package by its name (sluice, core, rules, stat, sluicehttp, sluicegin,
//     sluicegrpc, ...). Others: gin, grpc (google.golang.org/grpc), codes,
//     status and insecure (its codes, status and credentials/insecure).
//   - A fragment may use these names without declaring them (see prelude):
//     w http.ResponseWriter and r *http.Request (inside a handler), ctx,
//     engine *sluice.Engine, userID and clientIP (strings), target (a gRPC
//     address), doWork() error, fallback() error, reserve(ctx) error,
//     getUser (an http.HandlerFunc), mySlot (a custom slot: any), recoverUnary and
//     recoverStream (gRPC server interceptors). A block that declares one of
//     these names uses its own.
//
// Errors name the document's file and line (the generated files carry
// //line directives), and the block they belong to.
//
// TestDocsSpeakOfTheProject fails on "session 2", "design brief" and the
// like: findings are dated by commits and dates, and cite only what the
// repository holds.
//
// TestDocsNameExistingIdentifiers reads every `pkg.Name` in inline code and
// in ```go blocks (comments included), where pkg is the name of a package of
// this repository, and fails when no such package declares Name: prose and
// comments are not compiled, and are the first to go stale when an API moves.

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// stdAndOthers are the packages outside this repository that a fragment may
// use without importing them, by the name it uses.
var stdAndOthers = map[string]string{
	"context":  "context",
	"errors":   "errors",
	"fmt":      "fmt",
	"io":       "io",
	"log":      "log",
	"math":     "math",
	"net":      "net",
	"http":     "net/http",
	"netip":    "net/netip",
	"os":       "os",
	"slog":     "log/slog",
	"strconv":  "strconv",
	"strings":  "strings",
	"sync":     "sync",
	"time":     "time",
	"gin":      "github.com/gin-gonic/gin",
	"grpc":     "google.golang.org/grpc",
	"codes":    "google.golang.org/grpc/codes",
	"status":   "google.golang.org/grpc/status",
	"insecure": "google.golang.org/grpc/credentials/insecure",
}

// prelude is what a fragment may use without declaring it: the declaration
// and the package names it needs.
var prelude = map[string]struct {
	decl    string
	imports []string
}{
	"w":             {"var w http.ResponseWriter", []string{"http"}},
	"r":             {"var r *http.Request", []string{"http"}},
	"ctx":           {"var ctx = context.Background()", []string{"context"}},
	"engine":        {"var engine = sluice.New()", []string{"sluice"}},
	"userID":        {`var userID = "user-1"`, nil},
	"clientIP":      {`var clientIP = "127.0.0.1"`, nil},
	"target":        {`var target = "127.0.0.1:50051"`, nil},
	"doWork":        {"func doWork() error { return nil }", nil},
	"fallback":      {"func fallback() error { return nil }", nil},
	"reserve":       {"func reserve(context.Context) error { return nil }", []string{"context"}},
	"getUser":       {"func getUser(http.ResponseWriter, *http.Request) {}", []string{"http"}},
	"mySlot":        {"var mySlot any", nil},
	"recoverUnary":  {"var recoverUnary grpc.UnaryServerInterceptor", []string{"grpc"}},
	"recoverStream": {"var recoverStream grpc.StreamServerInterceptor", []string{"grpc"}},
}

const modulePath = "github.com/sluice-go/sluice"

// block is one fenced code block of a document.
type block struct {
	file  string // path relative to the repository root
	fence int    // line of the opening fence, from 1
	first int    // line of the block's first line of code
	info  string // the fence's info string
	text  string // the code, the fence's indentation removed
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.fence) }

func TestCodeBlocksCompile(t *testing.T) {
	root := repoRoot(t)
	goTool := goCommand(t)
	pkgs := repoPackages(t, root)

	var blocks []block
	for _, b := range documentBlocks(t, root) {
		if firstWord(b.info) == "go" {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go block found in README.md or docs/")
	}

	dir := t.TempDir()
	mods := libraryModules(t, root)
	writeModule(t, dir, root, mods)

	known := map[string]string{}
	for name, path := range stdAndOthers {
		known[name] = path
	}
	for name, paths := range pkgs.paths {
		var public []string // an internal package may share a public one's name
		for _, p := range paths {
			if !strings.Contains(p, "/internal/") {
				public = append(public, p)
			}
		}
		if len(public) == 1 {
			known[name] = public[0]
		}
	}

	for i, b := range blocks {
		pdir := filepath.Join(dir, fmt.Sprintf("b%02d", i+1))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			t.Fatal(err)
		}
		files, err := goFiles(b, filepath.Join(root, b.file), known)
		if err != nil {
			t.Errorf("%s: ```go block: %v", b, err)
			continue
		}
		for name, src := range files {
			if err := os.WriteFile(filepath.Join(pdir, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if t.Failed() {
		return
	}

	// go build reports every compile error (up to ten a package); go vet
	// then the vet checks, and the first error of a package only.
	for _, verb := range []string{"build", "vet"} {
		cmd := exec.Command(goTool, verb, "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS="+docGoFlags())
		out, err := cmd.CombinedOutput()
		if err != nil {
			reportFailures(t, "go "+verb, err, string(out), blocks, root, dir)
			return
		}
	}
}

// reportFailures reports the go command's messages, grouped by the block
// whose file and line they name.
func reportFailures(t *testing.T, command string, err error, out string, blocks []block, root, dir string) {
	t.Helper()
	out = strings.ReplaceAll(out, root+string(filepath.Separator), "")
	out = strings.ReplaceAll(out, dir+string(filepath.Separator), "")
	byBlock := map[int][]string{}
	var other []string
	pos := regexp.MustCompile(`([^\s:]+\.md):(\d+)`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if m := pos.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			if i := blockAt(blocks, m[1], n); i >= 0 {
				byBlock[i] = append(byBlock[i], strings.TrimSpace(line))
				continue
			}
		}
		if !strings.HasPrefix(line, "# ") {
			other = append(other, line)
		}
	}
	idx := make([]int, 0, len(byBlock))
	for i := range byBlock {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		t.Errorf("%s: ```go block fails %s (conventions: internal/doccheck/doccheck_test.go):\n\t%s",
			blocks[i], command, strings.Join(byBlock[i], "\n\t"))
	}
	if len(idx) == 0 || len(other) > 0 {
		t.Errorf("%s of the documents' ```go blocks failed: %v\n%s", command, err, strings.Join(other, "\n"))
	}
}

// blockAt returns the index of the block of file that holds line n, or -1.
func blockAt(blocks []block, file string, n int) int {
	for i, b := range blocks {
		if b.file == file && n >= b.fence && n <= b.first+strings.Count(b.text, "\n") {
			return i
		}
	}
	return -1
}

// goFiles turns b into the files of one package: block.go and, when the
// block uses names of the prelude, prelude.go. path is the document's
// absolute path, for //line directives.
func goFiles(b block, path string, known map[string]string) (map[string]string, error) {
	directive := func(line int) string { return fmt.Sprintf("//line %s:%d\n", path, line) }
	if startsWithPackage(b.text) {
		return map[string]string{"block.go": directive(b.first) + b.text}, nil
	}

	// Leading import declarations stay at file level.
	lines := strings.SplitAfter(b.text, "\n")
	n, depth := 0, 0
	for ; n < len(lines); n++ {
		l := strings.TrimSpace(lines[n])
		if depth > 0 {
			if strings.HasPrefix(l, ")") {
				depth = 0
			}
			continue
		}
		switch {
		case l == "" || strings.HasPrefix(l, "//"):
		case strings.HasPrefix(l, "import ("):
			depth = 1
		case strings.HasPrefix(l, "import "):
		default:
			goto body
		}
	}
body:
	imports, rest := strings.Join(lines[:n], ""), strings.Join(lines[n:], "")
	restLine := b.first + n

	var src string
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+imports+rest, parser.SkipObjectResolution); err == nil {
		// Declarations.
		src = "package p\n\n" + directive(b.first) + imports + rest
	} else {
		tail := "\treturn\n"
		if endsInReturn(rest) {
			tail = ""
		}
		src = "package p\n\n" + directive(b.first) + imports + "\nfunc _() (_ error) {\n" + directive(restLine) + rest + tail + "}\n"
	}

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "block.go", src, 0)
	if err != nil {
		return nil, err
	}
	declared := map[string]bool{}
	for _, is := range f.Imports {
		declared[importName(is)] = true
	}
	var autoImports, preludeDecls []string
	preludeImports := map[string]bool{}
	seen := map[string]bool{}
	for _, id := range f.Unresolved {
		name := id.Name
		if seen[name] || declared[name] || f.Scope.Lookup(name) != nil {
			continue
		}
		seen[name] = true
		if p, ok := prelude[name]; ok {
			preludeDecls = append(preludeDecls, p.decl)
			for _, imp := range p.imports {
				preludeImports[imp] = true
			}
			continue
		}
		if path, ok := known[name]; ok {
			autoImports = append(autoImports, fmt.Sprintf("import %s %q\n", name, path))
		}
	}
	sort.Strings(autoImports)
	sort.Strings(preludeDecls)
	files := map[string]string{
		"block.go": strings.Replace(src, "package p\n", "package p\n\n"+strings.Join(autoImports, ""), 1),
	}
	if len(preludeDecls) > 0 {
		var pre strings.Builder
		pre.WriteString("package p\n\n")
		names := make([]string, 0, len(preludeImports))
		for name := range preludeImports {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			fmt.Fprintf(&pre, "import %s %q\n", name, known[name])
		}
		pre.WriteString("\n" + strings.Join(preludeDecls, "\n") + "\n")
		files["prelude.go"] = pre.String()
	}
	return files, nil
}

// startsWithPackage reports whether src's first line that is neither blank
// nor a comment is a package clause.
func startsWithPackage(src string) bool {
	for _, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

// endsInReturn reports whether the last statement of the statements in src
// is a return statement (so that nothing may follow it).
func endsInReturn(src string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+src+"\n}\n", parser.SkipObjectResolution)
	if err != nil {
		return false
	}
	body := f.Decls[0].(*ast.FuncDecl).Body.List
	if len(body) == 0 {
		return false
	}
	_, ok := body[len(body)-1].(*ast.ReturnStmt)
	return ok
}

func importName(is *ast.ImportSpec) string {
	if is.Name != nil {
		return is.Name.Name
	}
	p, _ := strconv.Unquote(is.Path.Value)
	for name, path := range stdAndOthers {
		if path == p {
			return name
		}
	}
	return p[strings.LastIndex(p, "/")+1:]
}

// writeModule writes the module the blocks are compiled in: it requires
// the root module and mods (paths relative to root) and replaces them with
// their folders; its go.sum is theirs together.
func writeModule(t *testing.T, dir, root string, mods []string) {
	t.Helper()
	var gomod, gosum strings.Builder
	fmt.Fprintf(&gomod, "module doccheck.invalid\n\ngo 1.24\n\nrequire %s v0.0.0\n\nreplace %s => %s\n", modulePath, modulePath, root)
	sums := map[string]bool{}
	addSums := func(m string) {
		data, err := os.ReadFile(filepath.Join(root, m, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" && !sums[l] {
				sums[l] = true
				gosum.WriteString(l + "\n")
			}
		}
	}
	addSums(".")
	for _, m := range mods {
		path := modulePath + "/" + filepath.ToSlash(m)
		fmt.Fprintf(&gomod, "\nrequire %s v0.0.0\n\nreplace %s => %s\n", path, path, filepath.Join(root, m))
		addSums(m)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), []byte(gosum.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// libraryModules returns the folders (relative to root) of the repository's
// modules other than the root, leaving out examples: the modules a program
// may require.
func libraryModules(t *testing.T, root string) []string {
	t.Helper()
	var mods []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "go.mod" && rel != "go.mod" {
			mods = append(mods, filepath.Dir(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(mods)
	return mods
}

// packages is what the repository's Go packages declare.
type packages struct {
	paths map[string][]string          // package name -> import paths
	names map[string]map[string]string // package name -> top-level name -> import path
}

// repoPackages parses every package of the repository (examples and
// package main left out) for its top-level declarations, tests included.
func repoPackages(t *testing.T, root string) packages {
	t.Helper()
	ps := packages{paths: map[string][]string{}, names: map[string]map[string]string{}}
	fset := token.NewFileSet()
	seenPath := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(f.Name.Name, "_test")
		if name == "main" {
			return nil
		}
		imp := modulePath
		if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
			imp += "/" + dir
		}
		if !seenPath[imp] {
			seenPath[imp] = true
			ps.paths[name] = append(ps.paths[name], imp)
		}
		if ps.names[name] == nil {
			ps.names[name] = map[string]string{}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					ps.names[name][d.Name.Name] = imp
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						ps.names[name][s.Name.Name] = imp
					case *ast.ValueSpec:
						for _, n := range s.Names {
							ps.names[name][n.Name] = imp
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestDocsNameExistingIdentifiers(t *testing.T) {
	root := repoRoot(t)
	pkgs := repoPackages(t, root)
	ref := regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)`)
	code := regexp.MustCompile("`[^`]+`")
	check := func(file string, line int, text string) {
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			names, ok := pkgs.names[m[1]]
			if !ok {
				continue // not a package of this repository
			}
			if _, ok := names[m[2]]; !ok {
				t.Errorf("%s:%d: %s.%s: no package %s of this repository (%s) declares %s",
					file, line, m[1], m[2], m[1], strings.Join(pkgs.paths[m[1]], ", "), m[2])
			}
		}
	}
	for _, doc := range documents(t, root) {
		lines := readLines(t, filepath.Join(root, doc))
		inFence, fenceGo := false, false
		for i, l := range lines {
			trimmed := strings.TrimSpace(l)
			if strings.HasPrefix(trimmed, "```") {
				if !inFence {
					inFence, fenceGo = true, firstWord(strings.TrimPrefix(trimmed, "```")) == "go"
				} else if trimmed == "```" {
					inFence = false
				}
				continue
			}
			switch {
			case inFence && fenceGo:
				check(doc, i+1, l)
			case !inFence:
				for _, span := range code.FindAllString(l, -1) {
					check(doc, i+1, span)
				}
			}
		}
	}
}

// TestDocsSpeakOfTheProject fails on words that date findings by stages of
// the work or cite documents readers of the repository cannot see: the
// documents speak of behaviour, reasons, measurements, commits and dates.
func TestDocsSpeakOfTheProject(t *testing.T) {
	root := repoRoot(t)
	banned := regexp.MustCompile(`(?i)\bsessions? [0-9]|\bsession's\b|\bdesign (brief|card)\b|\bthe brief\b|\bshared/`)
	for _, doc := range documents(t, root) {
		for i, l := range readLines(t, filepath.Join(root, doc)) {
			if m := banned.FindString(l); m != "" {
				t.Errorf("%s:%d: %q: date findings by commit and date, and cite only what the repository holds", doc, i+1, m)
			}
		}
	}
}

// documents returns README.md and the Markdown files under docs/, relative
// to root, with slashes.
func documents(t *testing.T, root string) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, _ := filepath.Rel(root, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// documentBlocks returns the fenced code blocks of the documents.
func documentBlocks(t *testing.T, root string) []block {
	t.Helper()
	var blocks []block
	for _, doc := range documents(t, root) {
		lines := readLines(t, filepath.Join(root, doc))
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			trimmed := strings.TrimLeft(l, " ")
			if !strings.HasPrefix(trimmed, "```") {
				continue
			}
			indent := len(l) - len(trimmed)
			b := block{file: doc, fence: i + 1, first: i + 2, info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			var text strings.Builder
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				code := lines[i]
				if len(code)-len(strings.TrimLeft(code, " ")) >= indent {
					code = code[indent:]
				}
				text.WriteString(code + "\n")
			}
			if i == len(lines) {
				t.Errorf("%s: code block not closed", b)
			}
			b.text = text.String()
			blocks = append(blocks, b)
		}
	}
	return blocks
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// repoRoot is the root module's folder: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(data), "module "+modulePath+"\n") {
		t.Fatalf("%s is not the root of %s: %v", root, modulePath, err)
	}
	return root
}

// goCommand is the go command that runs this test, or the one on PATH.
func goCommand(t *testing.T) string {
	t.Helper()
	//lint:ignore SA1019 a test binary runs where go test built it, so its GOROOT is the go command that runs it
	if goroot := runtime.GOROOT(); goroot != "" {
		p := filepath.Join(goroot, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command: %v", err)
	}
	return p
}

// docGoFlags is GOFLAGS for building the documents' module: the caller's,
// less a -modfile (the standalone check names the module's own go.mod copy
// there, which is not the documents' module), plus -mod=mod.
func docGoFlags() string {
	var keep []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if !strings.HasPrefix(f, "-modfile=") && !strings.HasPrefix(f, "--modfile=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(append(keep, "-mod=mod"), " ")
}
