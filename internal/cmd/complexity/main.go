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
// (docs/design/architecture.md, "Function complexity"). -list prints every
// function above the bar with its reason, most complex first.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
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

// Func is a function above the bar.
type Func struct {
	Pos        token.Position
	Name       string // "F" or "(T).M"
	Complexity int
	Reason     string // the text after "complexity:", or ""
}

func main() {
	over := flag.Int("over", 15, "the most complexity a function may have without a reason")
	list := flag.Bool("list", false, "print every function above the bar, with its reason")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var all []Func
	for _, d := range dirs {
		fs, err := Check(d, *over)
		if err != nil {
			fmt.Fprintln(os.Stderr, "complexity:", err)
			os.Exit(1)
		}
		all = append(all, fs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Complexity > all[j].Complexity })
	bad := 0
	for _, f := range all {
		if f.Reason == "" {
			bad++
			fmt.Printf("%s: %s has complexity %d (over %d) and no \"// complexity: <reason>\" line in its doc comment\n", f.Pos, f.Name, f.Complexity, *over)
		} else if *list {
			fmt.Printf("%s: %s %d: %s\n", f.Pos, f.Name, f.Complexity, f.Reason)
		}
	}
	if *list {
		fmt.Printf("%d functions over %d, %d without a reason\n", len(all), *over, bad)
	}
	if bad > 0 {
		os.Exit(1)
	}
}

// Check returns the functions above over in the Go files under dir (tests,
// package main, generated files, testdata and hidden folders left out).
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
			if c := Complexity(fd); c > over {
				out = append(out, Func{Pos: fset.Position(fd.Pos()), Name: funcName(fd), Complexity: c, Reason: reason(fd.Doc)})
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
