package dashboard

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"strings"
	"time"
)

func newJSON(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true) // <, >, & as \u003c...: safe even if sniffed as HTML
	return enc
}

func marshalCompact(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func pathEscape(s string) string { return url.PathEscape(s) }

// maxDiffCells bounds the work of lineDiff: beyond it, the changed middle
// is shown as removed then added.
const maxDiffCells = 1 << 20

// lineDiff returns the lines removed ("- ") and added ("+ ") from a to b,
// with the unchanged lines between changes left out.
func lineDiff(a, b string) string {
	if a == b {
		return "(no change)"
	}
	x, y := splitLines(a), splitLines(b)
	// Common prefix and suffix.
	p := 0
	for p < len(x) && p < len(y) && x[p] == y[p] {
		p++
	}
	s := 0
	for s < len(x)-p && s < len(y)-p && x[len(x)-1-s] == y[len(y)-1-s] {
		s++
	}
	x, y = x[p:len(x)-s], y[p:len(y)-s]
	var out strings.Builder
	if len(x)*len(y) > maxDiffCells {
		for _, l := range x {
			out.WriteString("- " + l + "\n")
		}
		for _, l := range y {
			out.WriteString("+ " + l + "\n")
		}
		return out.String()
	}
	// Longest common subsequence, by dynamic programming from the ends.
	n, m := len(x), len(y)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + x[i] + "\n")
			i++
		default:
			out.WriteString("+ " + y[j] + "\n")
			j++
		}
	}
	return out.String()
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// pageNames are the templates of web/pages, each executed with
// web/layout.html.
var pageNames = []string{"login", "apps", "app", "rules", "history", "audit", "users", "error"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"path": pathEscape,
		"when": when,
		"mulf": func(f float64) float64 { return f * 100 },
		"mib":  func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) },
	}
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		t, err := template.New(n).Funcs(funcs).ParseFS(webFS, "web/layout.html", "web/pages/"+n+".html")
		if err != nil {
			return nil, err
		}
		out[n] = t
	}
	return out, nil
}

// when formats t for pages: UTC, to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}
