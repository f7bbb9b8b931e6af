package dashboard_test

import (
	"html"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// ruleFieldPaths walks a rule type's yaml tags, into its optional
// sections (pointers to structs): "threshold", "cluster", "cluster.mode".
// It also returns the enumerations' paths.
func ruleFieldPaths(t reflect.Type, prefix string) (paths, enums []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		paths = append(paths, prefix+name)
		if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
			p, e := ruleFieldPaths(f.Type.Elem(), prefix+name+".")
			paths, enums = append(paths, p...), append(enums, e...)
		} else if f.Type.Kind() == reflect.String && f.Type != reflect.TypeFor[string]() {
			enums = append(enums, prefix+name)
		}
	}
	return paths, enums
}

// minimal is a valid rule of each kind, to which a field is added.
var minimal = map[string]string{
	"flow":           "resource: x\n    threshold: 1",
	"system":         "metric: qps\n    threshold: 1",
	"circuitBreaker": "resource: x\n    threshold: 0.5\n    retryTimeout: 1s",
	"param":          "resource: x\n    threshold: 1",
	"authority":      "resource: x\n    strict: true",
}

// TestFormsHaveEveryField: the rules page's form of each kind has an input
// for every field of its rule type (read from the yaml tags here, apart
// from the dashboard's own reflection), including the cluster section's;
// each enumeration is a select offering exactly the values the rules
// package accepts (as its error for an unknown value lists them).
func TestFormsHaveEveryField(t *testing.T) {
	fl := newFleet(t, nil)
	c := signIn(t, fl.srv, "ed")
	code, page := c.get("/apps/shop/rules")
	require.Equal(t, 200, code)
	st := reflect.TypeFor[rules.Set]()
	kinds := 0
	for i := range st.NumField() {
		f := st.Field(i)
		kind, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Type.Kind() != reflect.Slice {
			continue
		}
		kinds++
		m := regexp.MustCompile(`(?s)<form class="ruleform" data-kind="` + kind + `"[^>]*>(.*?)</form>`).FindStringSubmatch(page)
		require.NotNil(t, m, "no form for %s", kind)
		form := m[1]
		paths, enums := ruleFieldPaths(f.Type.Elem(), "")
		var names []string
		for _, n := range regexp.MustCompile(`name="([^"]+)"`).FindAllStringSubmatch(form, -1) {
			names = append(names, html.UnescapeString(n[1]))
		}
		require.ElementsMatch(t, paths, names, "the %s form's inputs", kind)
		for _, e := range enums {
			sel := regexp.MustCompile(`(?s)<select name="` + regexp.QuoteMeta(e) + `"[^>]*>(.*?)</select>`).FindStringSubmatch(form)
			require.NotNil(t, sel, "%s.%s is not a select", kind, e)
			var opts []string
			for _, o := range regexp.MustCompile(`<option value="([^"]*)"`).FindAllStringSubmatch(sel[1], -1) {
				if o[1] != "" {
					opts = append(opts, o[1])
				}
			}
			// The values the rules package accepts, from its error.
			base := regexp.MustCompile(`(?m)\n    `+regexp.QuoteMeta(e)+`: .*$|^`+regexp.QuoteMeta(e)+`: .*\n    `).ReplaceAllString(minimal[kind], "")
			doc := kind + ":\n  - " + base + "\n    " + e + ": zz-unknown\n"
			if sec, key, ok := strings.Cut(e, "."); ok {
				doc = kind + ":\n  - " + base + "\n    " + sec + ":\n      " + key + ": zz-unknown\n"
			}
			_, err := rules.Decode([]byte(doc), rules.YAML)
			require.Error(t, err, doc)
			w := regexp.MustCompile(`want one of ([^)]*)\)`).FindStringSubmatch(err.Error())
			require.NotNil(t, w, "%s", err)
			require.Equal(t, strings.Split(w[1], ", "), opts, "%s.%s", kind, e)
		}
	}
	require.Equal(t, 5, kinds)
}

// TestEditValues: "edit" on a listed rule carries every field set, as the
// form holds it (durations as a rule file writes them, the section on).
func TestEditValues(t *testing.T) {
	fl := newFleet(t, nil)
	c := signIn(t, fl.srv, "ed")
	doc := "flow:\n  - id: f1\n    resource: \"a\\\"<b>\"\n    metric: qps\n    threshold: 7.5\n    strategy: direct\n    behavior: throttle\n" +
		"    maxQueueing: 250ms\n    statInterval: 2s\n    cluster: {fallback: pass, leases: true, apps: [checkout]}\n" +
		"param:\n  - resource: p\n    index: 2\n    threshold: 5\n    duration: 1m\n    exceptions: {\"vip\": 50, \"a b\": 0}\n    capacity: 100\n"
	_, err := rules.Decode([]byte(doc), rules.YAML)
	require.NoError(t, err)
	code, body := c.post("/apps/shop/rules", map[string][]string{"doc": {doc}, "base": {"1"}})
	require.Equal(t, 303, code, body)
	code, page := c.get("/apps/shop/rules")
	require.Equal(t, 200, code)
	var vals []string
	for _, m := range regexp.MustCompile(`data-values="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		vals = append(vals, html.UnescapeString(m[1]))
	}
	require.Equal(t, []string{
		`{"cluster":"on","cluster.apps":"[\"checkout\"]","cluster.fallback":"pass","cluster.leases":"on","id":"f1","metric":"qps","resource":"a\"\u003cb\u003e",` +
			`"statInterval":"2s","threshold":"7.5","throttle":"on","throttle.maxQueueing":"250ms"}`,
		`{"capacity":"100","duration":"1m0s","exceptions":"{\"a b\": 0, \"vip\": 50}","index":"2","resource":"p","threshold":"5"}`,
	}, vals)
}
