package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
)

// BenchmarkRulesPage10k measures the rules page of an application with
// 10,000 flow rules, as an editor gets it (from a file store), and
// reports the page's size.
func BenchmarkRulesPage10k(b *testing.B) {
	var doc strings.Builder
	doc.WriteString("flow:\n")
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&doc, "  - resource: GET /r%05d\n    threshold: %d\n", i, 10+i%90)
	}
	rs, err := filestore.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := rs.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte(doc.String()), Author: "seed"}); err != nil {
		b.Fatal(err)
	}
	pages, err := parsePages()
	if err != nil {
		b.Fatal(err)
	}
	d := &Dashboard{cfg: Config{Now: time.Now}, store: rs, pages: pages, window: 5 * time.Minute}
	c := &call{app: "shop", user: &principal{name: "ed", role: Editor, apps: map[string]bool{"shop": true}}, sess: &session{csrf: "token"}}
	run := func(b *testing.B, cold bool) {
		b.ReportAllocs()
		var size int
		for i := 0; i < b.N; i++ {
			if cold { // a version not seen yet: decoded first
				d.ruleCache = ruleCache{}
			}
			w := httptest.NewRecorder()
			d.rulesPage(w, httptest.NewRequest("GET", "/apps/shop/rules", nil), c)
			if w.Code != 200 {
				b.Fatal(w.Code, w.Body.String()[:200])
			}
			size = w.Body.Len()
		}
		b.ReportMetric(float64(size), "bytes/page")
	}
	b.Run("cold", func(b *testing.B) { run(b, true) })
	b.Run("warm", func(b *testing.B) { run(b, false) })
}
