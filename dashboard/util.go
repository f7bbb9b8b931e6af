package dashboard

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/url"
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
