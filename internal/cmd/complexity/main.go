// Command complexity fails when a function of the repository's libraries
// is more complex than 15 without a reason written beside it.
//
//	go run ./internal/cmd/complexity [-over N] [-list] [DIR...]
//
// It walks the folders named (default: the current one) and reads every Go
// file of a library package: not tests, programs (package main: commands
// and examples), generated files (a "// Code generated ... DO NOT EDIT."
// line), testdata or hidden folders. The complexity of a function
// is gocyclo's (github.com/fzipp/gocyclo): 1, plus one for each if, for,
// range, case of a switch or select other than default, && and ||; the
// function literals in a function count towards it. A function above the
// bar passes only when its doc comment has a line
//
//	// complexity: <one-line reason>
//
// (docs/design/architecture.md, "Function complexity"). A reason above a
// function at or under the bar is stale and fails too: the reason no longer
// describes the code, and left in place it would excuse the function if it
// grew past the bar again. -list prints every function above the bar with
// its reason, most complex first.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// generated is the comment by which Go tools know generated files
// (go help generate).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// Func is a function above the bar, or one at or under it with a reason
// (Stale).
type Func struct {
	Pos        token.Position
	Name       string // "F" or "(T).M"
	Complexity int
	Reason     string // the text after "complexity:", or ""
	Stale      bool   // at or under the bar, with a reason
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its arguments; it returns the exit code: 1 when
// a function above the bar has no reason or a reason is stale, 2 on a bad
// flag or an unreadable folder.
func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("complexity", flag.ContinueOnError)
	flags.SetOutput(stderr)
	over := flags.Int("over", 15, "the most complexity a function may have without a reason")
	list := flags.Bool("list", false, "print every function above the bar, with its reason")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	dirs := flags.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var all []Func
	for _, d := range dirs {
		fs, err := Check(d, *over)
		if err != nil {
			fmt.Fprintln(stderr, "complexity:", err)
			return 2
		}
		all = append(all, fs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Complexity > all[j].Complexity })
	above, bad, stale := 0, 0, 0
	for _, f := range all {
		switch {
		case f.Stale:
			stale++
			fmt.Fprintf(stdout, "%s: %s has complexity %d (at most %d) and a stale \"// complexity:\" line; remove it\n",
				f.Pos, f.Name, f.Complexity, *over)
		case f.Reason == "":
			above++
			bad++
			fmt.Fprintf(stdout, "%s: %s has complexity %d (over %d) and no \"// complexity: <reason>\" line in its doc comment\n",
				f.Pos, f.Name, f.Complexity, *over)
		default:
			above++
			if *list {
				fmt.Fprintf(stdout, "%s: %s %d: %s\n", f.Pos, f.Name, f.Complexity, f.Reason)
			}
		}
	}
	if *list {
		fmt.Fprintf(stdout, "%d functions over %d, %d without a reason, %d stale reasons\n", above, *over, bad, stale)
	}
	if bad > 0 || stale > 0 {
		return 1
	}
	return 0
}

// Check returns the functions above over in the Go files under dir (tests,
// package main, generated files, testdata and hidden folders left out), and
// those at or under it whose doc comment has a reason, marked Stale.
func Check(dir string, over int) ([]Func, error) {
	var out []Func
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if isGenerated(f) || f.Name.Name == "main" {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			c, r := Complexity(fd), reason(fd.Doc)
			if c > over || r != "" {
				out = append(out, Func{Pos: fset.Position(fd.Pos()), Name: funcName(fd), Complexity: c, Reason: r,
					Stale: c <= over})
			}
		}
		return nil
	})
	return out, err
}

// isGenerated reports whether f has a generated-code comment before its
// package clause.
func isGenerated(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			return false
		}
		for _, c := range cg.List {
			if generated.MatchString(c.Text) {
				return true
			}
		}
	}
	return false
}

// Complexity is gocyclo's cyclomatic complexity of fn.
func Complexity(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil { // default adds no path
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// reason returns the text after "complexity:" on a line of doc, or "".
func reason(doc *ast.CommentGroup) string {
	if doc == nil {
		return ""
	}
	for _, line := range strings.Split(doc.Text(), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "complexity:"); ok {
			return strings.TrimSpace(r)
		}
	}
	return ""
}

// funcName is "F" for a function, "(T).M" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		}
		break
	}
	if id, ok := t.(*ast.Ident); ok {
		return "(" + id.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}
