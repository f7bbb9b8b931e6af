package rls

import (
	"os"
	"path/filepath"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// TestRulesSharedThroughRedis: two replicas serving one rule file with
// -redis share every limit through sluice's cluster store in a real
// Redis: an exact flow rule (strict once shared) and a param rule admit
// exactly their thresholds across both replicas. With Redis gone each
// replica answers on, deciding with the rules' local fallback (a share
// of the threshold, docs/design/cluster.md), never above the threshold.
func TestRulesSharedThroughRedis(t *testing.T) {
	red := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	doc := "flow:\n  - resource: edge/path=/a\n    threshold: 6\n    statInterval: 1h\n    exact: true\n" +
		"param:\n  - resource: edge/user\n    threshold: 2\n    duration: 1h\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	o := ServerOptions{Rules: file, Redis: "redis://" + red.Addr() + "/0", App: "edge-shared"}
	o.RedisOptions.ExpectedInstances = 2
	var cs [2]pb.RateLimitServiceClient
	for i := range cs {
		cs[i] = pb.NewRateLimitServiceClient(dial(t, startServer(t, o).addr))
	}
	okA, _ := ask(t, cs[0], 5, "path", "/a")
	okB, _ := ask(t, cs[1], 5, "path", "/a")
	if okA+okB != 6 || okA != 5 {
		t.Fatalf("6 an hour shared: %d + %d admitted", okA, okB)
	}
	for _, user := range []string{"ann", "bob"} {
		okA, _ := ask(t, cs[0], 2, "user", user)
		okB, _ := ask(t, cs[1], 2, "user", user)
		if okA != 2 || okB != 0 {
			t.Fatalf("2 an hour per user, shared, %s: %d + %d admitted", user, okA, okB)
		}
	}

	red.Kill()
	for i, c := range cs {
		if ok, _ := ask(t, c, 10, "path", "/b"); ok != 10 {
			t.Fatalf("replica %d without Redis, a descriptor without a rule: %d of 10 OK", i, ok)
		}
		if ok, over := ask(t, c, 10, "user", "cy"); ok > 2 || over < 8 {
			t.Fatalf("replica %d without Redis: %d admitted for cy, %d refused; its local share is at most the threshold, 2", i, ok, over)
		}
	}
}
