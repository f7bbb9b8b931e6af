package doccheck

// The documents' commands and paths, checked.
//
// TestDocsCommandsAndPathsExist reads README.md and every docs/**/*.md and
// fails on a command or a path that does not name something of the
// repository:
//
//   - Commands: the lines of ```sh, ```bash, ```shell and ```console blocks
//     (in ```console only the lines after a "$ " prompt), and inline code
//     that starts with `make`, `go` or `cd` (after NAME=value assignments).
//     A line is split at &&, ||, |, ; and & into commands; # starts a comment.
//   - `make t1 t2`: each target is declared in the Makefile (of the folder
//     `make -C dir` names, or the current folder).
//   - `go test|run|build|vet|install|list|generate ... ./pkg/...`: each
//     package argument (./x, ../x, ., with or without /..., or an import
//     path of this module) is a folder holding Go files, relative to the
//     current folder; for `go run`, the arguments after the package are the
//     program's and are not read.
//   - `go test -bench re`: a benchmark function of the packages matches re
//     (its part before the first / outside parentheses, as go test reads it).
//   - `cd dir` must name a folder, which becomes the current folder for the
//     rest of the block (every block, and every inline span, starts at the
//     repository root). `cd` to an absolute path, a variable or ~ stops the
//     checks of relative paths until the block ends.
//   - Links [text](target), images and reference definitions resolve
//     relative to the document, as a Markdown renderer does, and must name a
//     file or folder of the repository; target#anchor and (#anchor) must name
//     a heading of that Markdown document (GitHub's slugs: lower case,
//     punctuation removed, spaces to hyphens, -1, -2 for repeats) or an
//     <a id> in it. Links with a scheme (https:, mailto:) are not followed.
//   - Words of prose that start with docs/ or examples/ are paths relative
//     to the repository root, and must exist.
//   - Inline code that is a path, `docs/x.md`, `examples/foo`, `./x/...`,
//     is relative to the repository root, and must exist when it starts with
//     ./ or ../, when its first element is a file or folder of the root, when
//     it is an import path of this module, or when it ends in a file
//     extension the repository uses (.go, .md, .yaml, ...). A path of another
//     project is written with its project, outside the code span, or as a
//     link to it.
//
// TestCheckerFindsStaleCommandsAndPaths runs the checker on a small
// repository of its own, with a stale command or path of each kind.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

func TestDocsCommandsAndPathsExist(t *testing.T) {
	root := repoRoot(t)
	ix := newRepoIndex(root)
	n := 0
	for _, doc := range documents(t, root) {
		for _, p := range ix.checkDocument(doc, readLines(t, filepath.Join(root, doc))) {
			t.Error(p)
			n++
		}
	}
	if n > 0 {
		t.Logf("%d stale commands or paths (conventions: internal/doccheck/paths_test.go)", n)
	}
}

func TestCheckerFindsStaleCommandsAndPaths(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+modulePath+"\n")
	write("Makefile", ".PHONY: test bench\ntest: fmt vet\n\tgo test ./...\nfmt vet:\n\t@true\nbench-compare:\n\t@true\nVAR := x\n")
	write("core/core.go", "package core\n")
	write("sluice.go", "package sluice\n")
	write("internal/flow/flow.go", "package flow\n")
	write("internal/flow/bench_test.go", "package flow\n\nimport \"testing\"\n\nfunc BenchmarkRejectCheck(b *testing.B) {}\nfunc BenchmarkCluster(b *testing.B) {}\n")
	write("slots/slots.go", "package slots\n")
	write("dashboard/Makefile", "ui:\n\t@true\n")
	write("dashboard/cmd/app/main.go", "package main\n")
	write("slots/doc.md", "") // a folder without Go files
	write("docs/guide.md", "# Guide\n\n## Rule files: the `flow` key\n\n## Rule files: the `flow` key\n\n```yaml\n# not a heading\n```\n<a id=\"kept\"></a>\n")
	write("docs/design/notes.md", "# Notes\n")
	write("examples/quickstart/main.go", "package main\n")

	cases := []struct {
		doc, line string
		want      string // a part of the one problem expected; "" for none
	}{
		{"README.md", "`make test`", ""},
		{"README.md", "`make fmt vet bench-compare BENCH_COUNT=7`", ""},
		{"README.md", "`BENCH_COUNT=7 make bench-compar`", `no target "bench-compar"`},
		{"README.md", "`make VAR`", `no target "VAR"`},
		{"README.md", "`make -C dashboard ui`", ""},
		{"README.md", "`make -C dashboard test`", `no target "test" in dashboard/Makefile`},
		{"README.md", "`go test -race ./core/ ./internal/...`", ""},
		{"README.md", "`go test -bench . -run ^$ ./slots/...`", `-bench .: no benchmark of ./slots/... matches`},
		{"README.md", "`go test -bench . -run ^$ ./slots/flow/`", `./slots/flow/: no Go package`},
		{"README.md", "`go test -run '^$' -bench 'RejectCheck$|Gone' -count 6 ./internal/...`", ""},
		{"README.md", "`go test -run '^$' -bench='Cluster/(Strict|Rate)' ./internal/flow`", ""},
		{"README.md", "`go test -bench Check ./core`", `-bench Check: no benchmark of ./core matches`},
		{"README.md", "`cd internal/flow && go test -bench RejectCheck`", ""},
		{"README.md", "`go test -run Alloc .`", ""},
		{"README.md", "`go run ./examples/quickstart -n 3 ./nowhere`", ""},
		{"README.md", "`go run ./examples/quick`", `./examples/quick: no Go package`},
		{"README.md", "`go install github.com/sluice-go/sluice/dashboard/cmd/app@latest`", ""},
		{"README.md", "`go install github.com/sluice-go/sluice/cmd/app@latest`", `no Go package`},
		{"README.md", "`cd dashboard && go run ./cmd/app`", ""},
		{"README.md", "`cd dashboard && go run ./cmd/gone`", `./cmd/gone: no Go package in dashboard/cmd/gone`},
		{"README.md", "`cd dash && make`", `cd dash: no folder dash`},
		{"README.md", "`cd $(mktemp -d) && go run ./anything`", ""},
		{"README.md", "`go -C dashboard build ./cmd/app`", ""},
		{"README.md", "```sh\ncd dashboard\ngo vet ./cmd/app   # a comment: ./gone\n```", ""},
		{"README.md", "```sh\ncd dashboard\ngo vet ./core\n```", `./core: no Go package in dashboard/core`},
		{"README.md", "```sh\nmake test \\\n  bench\n```", `no target "bench"`},
		{"README.md", "```console\n$ make tset\nmake: output ./not/checked\n```", `no target "tset"`},
		{"README.md", "```text\nmake nothing-checked-here\n```", ""},
		{"README.md", "`docs/guide.md`, `examples/quickstart`, `./core/...`", ""},
		{"README.md", "`docs/gone.md`", "`docs/gone.md`: no such file or folder"},
		{"README.md", "`internal/window/window.go`", "no such file or folder"},
		{"README.md", "`chain/chain.go`", "no such file or folder"},
		{"README.md", "`docs/*.md`, `GET /users/{id}`, `application/json`, `golang.org/x/time/rate`", ""},
		{"README.md", "`github.com/sluice-go/sluice/adapters/gin`", "no such file or folder"},
		{"README.md", "[the guide](docs/guide.md) and [notes](docs/design/notes.md#notes)", ""},
		{"README.md", "[rules](docs/guide.md#rule-files-the-flow-key-1), [kept](docs/guide.md#kept)", ""},
		{"README.md", "[gone](docs/gone.md)", "docs/gone.md: no such file or folder"},
		{"README.md", "[heading](docs/guide.md#not-a-heading)", `no heading "#not-a-heading" in docs/guide.md`},
		{"README.md", "[here](#guide)", `no heading "#guide" in README.md`},
		{"README.md", "[x](https://example.com/docs/gone.md) <mailto:a@b.c>", ""},
		{"README.md", "![chart](docs/img/chart.png)", "docs/img/chart.png: no such file or folder"},
		{"README.md", "[ref]: docs/gone.md", "docs/gone.md: no such file or folder"},
		{"README.md", "[outside](../x.md)", "outside the repository"},
		{"README.md", "as docs/guide.md says, and examples/quickstart.", ""},
		{"README.md", "as docs/design/gone.md says", "docs/design/gone.md: no such file"},
		{"docs/design/notes.md", "[up](../guide.md#guide), [self](#notes)", ""},
		{"docs/design/notes.md", "[up](guide.md)", "docs/design/guide.md: no such file or folder"},
		{"docs/design/notes.md", "`make test` from `docs/guide.md`", ""},
		{"README.md", "`go run ./cmd/app` in `dashboard/`, `go test .` in the `core` module", ""},
		{"README.md", "`go run ./cmd/app`, in `core/`", "./cmd/app: no Go package in core/cmd/app"},
		{"README.md", "`go test .` in `dashbord/`", "no folder dashbord"},
		{"README.md", "`go run ./cmd/app` (from `dashboard/`)", ""},
		{"README.md", "`go run ./cmd/app` in\n`dashboard/`, and", ""},
		{"README.md", "sentinel-golang's `core/flow/slot_test.go`, ours `core/core.go`", ""},
		{"README.md", "- sentinel-golang\n  `core/base/entry.go`\n- ours: `core/base/entry.go`", "`core/base/entry.go`: no such file"},
		{"README.md", "tags `adapters/gin/v0.1.0`, `v0.1.0`", ""},
	}
	ix := newRepoIndex(root)
	for _, c := range cases {
		lines := append([]string{"# Readme", ""}, strings.Split(c.line, "\n")...)
		got := ix.checkDocument(c.doc, lines)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s %q: want no problem, got %q", c.doc, c.line, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
			t.Errorf("%s %q: want one problem with %q, got %q", c.doc, c.line, c.want, got)
		}
	}
}

// repoIndex answers what the documents may name.
type repoIndex struct {
	root    string
	targets map[string]map[string]bool // folder (slash, root-relative) -> Makefile targets; nil: no Makefile
	anchors map[string]map[string]bool // Markdown file (slash, root-relative) -> anchors
}

func newRepoIndex(root string) *repoIndex {
	return &repoIndex{root: root, targets: map[string]map[string]bool{}, anchors: map[string]map[string]bool{}}
}

var shellInfo = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

var (
	codeSpan    = regexp.MustCompile("`[^`]+`")
	mdLink      = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef      = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?([^\s>]+)>?`)
	htmlRef     = regexp.MustCompile(`\b(?:src|href)="([^"]+)"`)
	commandWord = regexp.MustCompile(`^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:make|go|cd)(?:\s|$)`)
	pathLike    = regexp.MustCompile(`^(?:\./|\.\./)*[A-Za-z0-9_.@-]+(?:/[A-Za-z0-9_.@*-]*)*$`)
	listItem    = regexp.MustCompile(`^\s*(?:[-*+]|\d+\.)\s`)
	peerName    = regexp.MustCompile(`(?i)sentinel|gobreaker|guava|x/time/rate|golang/time|uber|ratelimit|concurrency-limits|failsafe|resilience4j|gopsutil|go-redis|grpc-go|client_golang|envoy|nginx`)
	inFolder    = regexp.MustCompile("^[\\s,(]*(?:run\\s+)?(?:in|from)\\s+(?:the\\s+)?`([A-Za-z0-9_./-]+)`")
	semverTail  = regexp.MustCompile(`/v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$`)
	linkTarget  = regexp.MustCompile(`\]\([^)]*\)`)
	prosePath   = regexp.MustCompile(`(?:^|[\s(,;"])((?:docs|examples)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)
	fileExt     = regexp.MustCompile(`\.(?:go|md|mod|sum|work|yaml|yml|json|png|svg|sh|txt|lua|html|js|css|proto)$`)
)

// checkDocument returns the problems of doc (a path relative to the root,
// with slashes) whose lines are lines, as "doc:line: message".
func (ix *repoIndex) checkDocument(doc string, lines []string) []string {
	var out []string
	report := func(line int, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: %s", doc, line, fmt.Sprintf(format, args...)))
	}
	peers := false // the paragraph or list item so far names another project
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimSpace(l)
		if trimmed == "" || listItem.MatchString(l) || strings.HasPrefix(trimmed, "#") {
			peers = false
		}
		peers = peers || peerName.MatchString(l)
		if strings.HasPrefix(trimmed, "```") {
			info := firstWord(strings.TrimPrefix(trimmed, "```"))
			cwd := "."
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				if !shellInfo[info] {
					continue
				}
				start, cmd := i, strings.TrimSpace(lines[i])
				for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
					i++
					cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
				}
				if info == "console" {
					if !strings.HasPrefix(cmd, "$ ") {
						continue
					}
					cmd = cmd[2:]
				}
				for _, msg := range ix.checkCommandLine(cmd, &cwd) {
					report(start+1, "`%s`: %s", cmd, msg)
				}
			}
			continue
		}
		for _, loc := range codeSpan.FindAllStringIndex(l, -1) {
			span := l[loc[0]:loc[1]]
			code := strings.Trim(span, "`")
			if commandWord.MatchString(code) {
				cwd := "."
				after := l[loc[1]:]
				if i+1 < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```") {
					after += " " + lines[i+1] // "in" at the end of a line, the folder on the next
				}
				if m := inFolder.FindStringSubmatch(after); m != nil && !ix.isFile(path.Clean(m[1])) {
					cwd = path.Clean(strings.TrimPrefix(m[1], "./"))
					if !ix.isDir(cwd) {
						report(i+1, "%s in `%s`: no folder %s", span, m[1], cwd)
						continue
					}
				}
				for _, msg := range ix.checkCommandLine(code, &cwd) {
					report(i+1, "%s: %s", span, msg)
				}
				continue
			}
			if msg := ix.checkPathSpan(code); msg != "" && !(peers && !strings.HasPrefix(code, modulePath)) {
				report(i+1, "%s: %s", span, msg)
			}
		}
		prose := codeSpan.ReplaceAllString(l, "")
		words := refDef.ReplaceAllString(linkTarget.ReplaceAllString(prose, "]"), "")
		for _, m := range prosePath.FindAllStringSubmatch(words, -1) {
			if p := strings.TrimSuffix(m[1], "."); !ix.exists(p) {
				report(i+1, "%s: no such file or folder (paths in prose are relative to the repository root)", p)
			}
		}
		var targets []string
		for _, re := range []*regexp.Regexp{mdLink, refDef, htmlRef} {
			for _, m := range re.FindAllStringSubmatch(prose, -1) {
				targets = append(targets, m[1])
			}
		}
		for _, target := range targets {
			if msg := ix.checkLink(doc, target); msg != "" {
				report(i+1, "link %s: %s", target, msg)
			}
		}
	}
	return out
}

// checkCommandLine checks the commands of one shell line, run in *cwd (a
// folder relative to the root; "" once it is unknown), and moves *cwd as cd
// does.
func (ix *repoIndex) checkCommandLine(line string, cwd *string) []string {
	var out []string
	for _, words := range shellCommands(line) {
		for len(words) > 0 && (isAssignment(words[0]) || words[0] == "env" || words[0] == "time" || words[0] == "exec") {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		switch words[0] {
		case "cd":
			if len(words) < 2 || !relativeWord(words[1]) {
				*cwd = ""
				continue
			}
			if *cwd == "" {
				continue
			}
			dir, ok := ix.inRepo(*cwd, words[1])
			if !ok || !ix.isDir(dir) {
				out = append(out, fmt.Sprintf("cd %s: no folder %s", words[1], dir))
				*cwd = ""
				continue
			}
			*cwd = dir
		case "make":
			if *cwd != "" {
				out = append(out, ix.checkMake(*cwd, words[1:])...)
			}
		case "go":
			if *cwd != "" {
				out = append(out, ix.checkGo(*cwd, words[1:])...)
			}
		}
	}
	return out
}

func (ix *repoIndex) checkMake(cwd string, args []string) []string {
	dir := cwd
	var targets []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" && i+1 < len(args):
			i++
			if !relativeWord(args[i]) {
				return nil
			}
			d, ok := ix.inRepo(cwd, args[i])
			if !ok || !ix.isDir(d) {
				return []string{fmt.Sprintf("make -C %s: no folder %s", args[i], d)}
			}
			dir = d
		case strings.HasPrefix(a, "-"), isAssignment(a):
		default:
			targets = append(targets, a)
		}
	}
	declared := ix.makeTargets(dir)
	makefile := path.Join(dir, "Makefile")
	if declared == nil {
		return []string{fmt.Sprintf("no %s", makefile)}
	}
	var out []string
	for _, tg := range targets {
		if !declared[tg] {
			out = append(out, fmt.Sprintf("no target %q in %s", tg, makefile))
		}
	}
	return out
}

// goValueFlags are the go command's flags that take the next word as their
// value (unless written -flag=value).
var goValueFlags = map[string]bool{
	"run": true, "bench": true, "count": true, "benchtime": true, "timeout": true, "cpu": true,
	"tags": true, "fuzz": true, "fuzztime": true, "fuzzminimizetime": true, "cpuprofile": true,
	"memprofile": true, "blockprofile": true, "mutexprofile": true, "trace": true, "o": true,
	"modfile": true, "p": true, "parallel": true, "shuffle": true, "coverprofile": true,
	"covermode": true, "coverpkg": true, "exec": true, "ldflags": true, "gcflags": true,
	"asmflags": true, "mod": true, "pkgdir": true, "toolexec": true, "overlay": true, "skip": true,
	"outputdir": true, "f": true, "memprofilerate": true, "blockprofilerate": true,
	"mutexprofilefraction": true,
}

var goPackageVerbs = map[string]bool{"test": true, "run": true, "build": true, "vet": true, "install": true, "list": true, "generate": true}

func (ix *repoIndex) checkGo(cwd string, args []string) []string {
	if len(args) >= 2 && args[0] == "-C" {
		if !relativeWord(args[1]) {
			return nil
		}
		d, ok := ix.inRepo(cwd, args[1])
		if !ok || !ix.isDir(d) {
			return []string{fmt.Sprintf("go -C %s: no folder %s", args[1], d)}
		}
		cwd, args = d, args[2:]
	}
	if len(args) == 0 || !goPackageVerbs[args[0]] {
		return nil
	}
	verb := args[0]
	var out []string
	var bench string
	var pkgs []string // the package arguments, as given
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-args" {
			break
		}
		if strings.HasPrefix(a, "-") {
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !hasValue && goValueFlags[name] && i+1 < len(args) {
				i++
				value = args[i]
			}
			if name == "bench" || name == "test.bench" {
				bench = value
			}
			continue
		}
		if msg := ix.checkPackage(cwd, a); msg != "" {
			out = append(out, msg)
		}
		pkgs = append(pkgs, a)
		if verb == "run" {
			break // the program's arguments follow
		}
	}
	if verb == "test" && bench != "" && len(out) == 0 {
		if msg := ix.checkBench(cwd, bench, pkgs); msg != "" {
			out = append(out, msg)
		}
	}
	return out
}

// checkBench reports a -bench pattern that matches no benchmark function
// of the packages (the folder cwd when none is given): a benchmark that
// moved leaves a command that runs nothing and says nothing.
func (ix *repoIndex) checkBench(cwd, bench string, pkgs []string) string {
	top := bench
	depth := 0
	for i, c := range bench {
		switch c {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case '/':
			if depth == 0 {
				top = bench[:i]
				goto split
			}
		}
	}
split:
	re, err := regexp.Compile(top)
	if err != nil {
		return ""
	}
	if len(pkgs) == 0 {
		pkgs = []string{"."}
	}
	benchFunc := regexp.MustCompile(`(?m)^func (Benchmark\w*)\(\s*\w+ \*testing\.B\s*\)`)
	for _, arg := range pkgs {
		if strings.HasPrefix(arg, modulePath) {
			p := strings.TrimPrefix(arg, modulePath)
			if at := strings.Index(p, "@"); at >= 0 {
				p = p[:at]
			}
			cwd, arg = ".", "./"+strings.TrimPrefix(p, "/")
		}
		all := strings.HasSuffix(arg, "/...") || arg == "..."
		d, ok := ix.inRepo(cwd, strings.TrimSuffix(strings.TrimSuffix(arg, "..."), "/"))
		if !ok {
			continue
		}
		base := filepath.Join(ix.root, filepath.FromSlash(d))
		found := false
		filepath.WalkDir(base, func(p string, e os.DirEntry, err error) error {
			if err != nil || found {
				return filepath.SkipAll
			}
			if e.IsDir() {
				if p != base && (!all || e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(e.Name(), "_test.go") {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, m := range benchFunc.FindAllStringSubmatch(string(data), -1) {
				if re.MatchString(m[1]) {
					found = true
					return filepath.SkipAll
				}
			}
			return nil
		})
		if found {
			return ""
		}
	}
	return fmt.Sprintf("-bench %s: no benchmark of %s matches", bench, strings.Join(pkgs, " "))
}

// checkPackage checks a package argument of the go command run in cwd.
func (ix *repoIndex) checkPackage(cwd, arg string) string {
	switch {
	case strings.HasPrefix(arg, modulePath+"/") || arg == modulePath || strings.HasPrefix(arg, modulePath+"@"):
		p := strings.TrimPrefix(arg, modulePath)
		if at := strings.Index(p, "@"); at >= 0 {
			p = p[:at]
		}
		arg = "./" + strings.TrimPrefix(p, "/")
		cwd = "."
		fallthrough
	case arg == "." || arg == ".." || strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../"):
		if strings.HasSuffix(arg, ".go") {
			if f, ok := ix.inRepo(cwd, arg); !ok || !ix.isFile(f) {
				return fmt.Sprintf("%s: no file %s", arg, f)
			}
			return ""
		}
		p, all := strings.TrimSuffix(arg, "/..."), strings.HasSuffix(arg, "/...") || arg == "..."
		p = strings.TrimSuffix(p, "/")
		d, ok := ix.inRepo(cwd, p)
		if !ok {
			return fmt.Sprintf("%s: outside the repository", arg)
		}
		if !ix.hasGo(d, all) {
			return fmt.Sprintf("%s: no Go package in %s", arg, d)
		}
	}
	return ""
}

// checkPathSpan checks inline code that may be a path of the repository.
func (ix *repoIndex) checkPathSpan(code string) string {
	if !pathLike.MatchString(code) || strings.Contains(code, "://") || semverTail.MatchString(code) {
		return ""
	}
	p := code
	if strings.HasPrefix(p, modulePath+"/") {
		p = strings.TrimPrefix(p, modulePath+"/")
		if at := strings.Index(p, "@"); at >= 0 {
			p = p[:at]
		}
	} else {
		first := strings.SplitN(strings.TrimLeft(p, "./"), "/", 2)[0]
		explicit := strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../")
		atRoot := strings.Contains(p, "/") && ix.exists(first)
		file := strings.Contains(p, "/") && fileExt.MatchString(p) && !strings.Contains(first, ".")
		if !explicit && !atRoot && !file {
			return ""
		}
	}
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
	if p == "..." || p == "" {
		return ""
	}
	d, ok := ix.inRepo(".", p)
	if !ok {
		return "outside the repository"
	}
	if strings.ContainsAny(d, "*") {
		if m, _ := filepath.Glob(filepath.Join(ix.root, filepath.FromSlash(d))); len(m) == 0 {
			return "matches no file"
		}
		return ""
	}
	if !ix.exists(d) {
		return "no such file or folder (paths in code are relative to the repository root)"
	}
	return ""
}

// checkLink checks a link target of doc.
func (ix *repoIndex) checkLink(doc, target string) string {
	if regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	p := doc
	if file != "" {
		var ok bool
		base := path.Dir(doc)
		if strings.HasPrefix(file, "/") {
			base, file = ".", strings.TrimPrefix(file, "/")
		}
		p, ok = ix.inRepo(base, file)
		if !ok {
			return "points outside the repository"
		}
		if !ix.exists(p) {
			return p + ": no such file or folder"
		}
	}
	if anchor != "" && strings.HasSuffix(p, ".md") && !ix.markdownAnchors(p)[strings.ToLower(anchor)] {
		return fmt.Sprintf("no heading %q in %s", "#"+anchor, p)
	}
	return ""
}

// markdownAnchors returns the anchors of a Markdown file: its headings'
// slugs as GitHub makes them, and the ids and names of its <a> elements.
func (ix *repoIndex) markdownAnchors(file string) map[string]bool {
	if a, ok := ix.anchors[file]; ok {
		return a
	}
	a := map[string]bool{}
	ix.anchors[file] = a
	data, err := os.ReadFile(filepath.Join(ix.root, filepath.FromSlash(file)))
	if err != nil {
		return a
	}
	seen := map[string]int{}
	idRE := regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	inFence := false
	for _, l := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range idRE.FindAllStringSubmatch(l, -1) {
			a[strings.ToLower(m[1])] = true
		}
		if !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimLeft(l, "#")
		if len(l)-len(text) > 6 || (text != "" && text[0] != ' ' && text[0] != '\t') {
			continue
		}
		s := slug(strings.TrimRight(strings.TrimSpace(text), "# "))
		if n := seen[s]; n > 0 {
			a[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	}
	return a
}

// slug is GitHub's anchor for a heading: links replaced by their text, then
// lower case, every character but letters, digits, marks, '_', '-' and ' '
// removed, spaces turned into hyphens.
func slug(heading string) string {
	heading = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// makeTargets returns the targets the Makefile of dir declares, or nil
// when dir has none.
func (ix *repoIndex) makeTargets(dir string) map[string]bool {
	if tg, ok := ix.targets[dir]; ok {
		return tg
	}
	data, err := os.ReadFile(filepath.Join(ix.root, filepath.FromSlash(dir), "Makefile"))
	if err != nil {
		ix.targets[dir] = nil
		return nil
	}
	tg := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.%/ -]+?)\s*::?(?:[^=]|$)`)
	for _, l := range strings.Split(string(data), "\n") {
		if m := rule.FindStringSubmatch(l); m != nil {
			for _, name := range strings.Fields(m[1]) {
				if !strings.HasPrefix(name, ".") {
					tg[name] = true
				}
			}
		}
	}
	ix.targets[dir] = tg
	return tg
}

// inRepo joins rel to dir (both relative to the root, with slashes) and
// reports whether the result stays inside the repository.
func (ix *repoIndex) inRepo(dir, rel string) (string, bool) {
	p := path.Clean(path.Join(dir, rel))
	return p, p != ".." && !strings.HasPrefix(p, "../") && !path.IsAbs(p)
}

func (ix *repoIndex) stat(p string) os.FileInfo {
	fi, err := os.Stat(filepath.Join(ix.root, filepath.FromSlash(p)))
	if err != nil {
		return nil
	}
	return fi
}

func (ix *repoIndex) exists(p string) bool { return ix.stat(p) != nil }
func (ix *repoIndex) isDir(p string) bool  { fi := ix.stat(p); return fi != nil && fi.IsDir() }
func (ix *repoIndex) isFile(p string) bool { fi := ix.stat(p); return fi != nil && !fi.IsDir() }

// hasGo reports whether folder dir holds a .go file, or (all) holds one
// at any depth.
func (ix *repoIndex) hasGo(dir string, all bool) bool {
	if !ix.isDir(dir) {
		return false
	}
	found := false
	base := filepath.Join(ix.root, filepath.FromSlash(dir))
	filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipAll
		}
		if d.IsDir() {
			if p != base && (!all || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// shellCommands splits a shell line into commands (at &&, ||, |, ;, &
// and parentheses) and each into words, quotes removed; a # at the start
// of a word begins a comment.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				end = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			endCmd()
			return cmds
		case c == '&' || c == '|' || c == ';' || c == '(' || c == ')':
			endCmd()
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			// A command substitution is a word of its own, not checked.
			depth, j := 0, i+1
			for ; j < len(line); j++ {
				if line[j] == '(' {
					depth++
				} else if line[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			word.WriteString(line[i:min(j+1, len(line))])
			inWord = true
			i = j
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

func isAssignment(w string) bool {
	return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(w)
}

// relativeWord reports whether w is a relative path the checks can follow:
// not absolute, not ~, no variable or substitution.
func relativeWord(w string) bool {
	return w != "" && w != "-" && !strings.HasPrefix(w, "/") && !strings.HasPrefix(w, "~") && !strings.ContainsAny(w, "$`")
}
