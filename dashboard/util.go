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

func pathEscape(s string) string { return url.PathEscape(s) }

// pageNames are the templates of web/pages, each executed with
// web/layout.html.
var pageNames = []string{"login", "apps", "app", "rules", "history", "audit", "users", "error", "confirm"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"path":  pathEscape,
		"when":  when,
		"mib":   func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) },
		"f2":    func(f *float64) string { return fmt.Sprintf("%.2f", *f) },
		"pct":   func(f *float64) string { return fmt.Sprintf("%.0f%%", *f*100) },
		"age":   age,
		"add":   func(a, b int) int { return a + b },
		"sub":   func(a, b int) int { return max(a-b, 0) },
		"add64": func(a, b int64) int64 { return a + b },
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

// notMeasured is the title of an instance's Load, CPU or Memory cell that
// has no figure (the page's script has the same text): an engine samples
// them only once a system rule on load1 or CPU usage is loaded
// (sluice.Engine.SystemMetrics), and reports NaN and zero before.
const notMeasured = "not measured yet: an instance samples load, CPU and memory once it has a system rule on load1 or CPU usage"

// when formats t for pages: UTC, to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// age says how long ago the Unix second then was, at now: "now" within a
// second, else "N s ago" (the page's script says the same).
func age(now, then int64) string {
	if now-then <= 1 {
		return "now"
	}
	return fmt.Sprintf("%d s ago", now-then)
}
