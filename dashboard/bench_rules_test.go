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
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/stat"
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
	rs, err := filestore.Open(b.TempDir(), filestore.Config{})
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

// BenchmarkResources10k measures a page of the resource table over
// 10,000 resources (2 instances, 10 seconds of frames each holding every
// resource, from memory; 1,000 rules): added up, searched or sorted, and
// encoded.
func BenchmarkResources10k(b *testing.B) {
	const instances, seconds, resources = 2, 10, 10000
	now := time.Unix(1_800_000_000, 0)
	st := memstore.New(func() time.Time { return now })
	ctx := context.Background()
	for i := 0; i < instances; i++ {
		for s := int64(0); s < seconds; s++ {
			f := cluster.Frame{App: "shop", Instance: fmt.Sprint("shop-", i), Second: now.Unix() - seconds + s}
			for r := 0; r < resources; r++ {
				f.Resources = append(f.Resources, cluster.ResourceSecond{Resource: fmt.Sprintf("GET /r%05d", r),
					Second: stat.Second{Pass: uint64(r % 100), Block: 1, Complete: 10, AvgRT: time.Millisecond}})
			}
			if err := st.Publish(ctx, f, seconds, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	}
	rs, err := filestore.Open(b.TempDir(), filestore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var doc strings.Builder
	doc.WriteString("flow:\n")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&doc, "  - resource: GET /r%05d\n    threshold: 50\n", i*10)
	}
	if _, err := rs.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte(doc.String()), Author: "seed"}); err != nil {
		b.Fatal(err)
	}
	d := &Dashboard{cfg: Config{Now: func() time.Time { return now }}, store: rs, tel: st, window: 5 * time.Minute}
	c := &call{app: "shop"}
	for _, q := range []string{"sort=pass&desc=1", "sort=resource&q=r09", "sort=rt&offset=9950"} {
		b.Run(q, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				d.resources(w, httptest.NewRequest("GET", "/api/apps/shop/resources?"+q, nil), c)
				if w.Code != 200 || !strings.Contains(w.Body.String(), `"all":10000`) {
					b.Fatal(w.Code, w.Body.String()[:200])
				}
			}
		})
	}
}
