package sluiceredis

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// The processes of TestQuotaProcessesShareMonth: the test binary
// re-executed (TestMain runs quotaChild), each an engine of its own
// sharing one monthly cluster quota through a real redis-server.

const (
	envQuotaChild = "SLUICE_TEST_QUOTA_CHILD" // the process's index
	envQuotaSpec  = "SLUICE_TEST_QUOTA_SPEC"  // quotaSpec as JSON
)

type quotaSpec struct {
	Redis      string
	Limit      int
	Zone       string
	Goroutines int
	Start      int64 // Unix ns: every process starts its load then
}

type quotaLine struct {
	Admitted int    `json:"admitted"` // units
	Fallback int    `json:"fallback"`
	Err      string `json:"err,omitempty"`
}

// quotaChild runs one process: Goroutines goroutines enter until the
// store refuses them, then it writes what it admitted.
func quotaChild() int {
	enc := json.NewEncoder(os.Stdout)
	var sp quotaSpec
	if err := json.Unmarshal([]byte(os.Getenv(envQuotaSpec)), &sp); err != nil {
		_ = enc.Encode(quotaLine{Err: err.Error()})
		return 1
	}
	life := time.AfterFunc(time.Until(time.Unix(0, sp.Start))+30*time.Second, func() { os.Exit(3) })
	defer life.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: sp.Redis})
	defer rdb.Close()
	g := sluice.New(sluice.WithCluster(New(rdb), sluice.ClusterConfig{App: "plan", InstanceID: "p" + os.Getenv(envQuotaChild), Timeout: 2 * time.Second}))
	defer g.Close()
	rule := rules.Flow{Resource: "api", Threshold: float64(sp.Limit), Quota: &rules.Quota{Period: "month", Zone: sp.Zone}, Cluster: &rules.Cluster{Fallback: rules.FallbackBlock}}
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}); err != nil {
		_ = enc.Encode(quotaLine{Err: err.Error()})
		return 1
	}
	time.Sleep(time.Until(time.Unix(0, sp.Start)))
	var admitted, fallback atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < sp.Goroutines; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				n := 1 + i%2
				p, err := g.Entry("api", sluice.WithBatch(n))
				if err == nil {
					p.Exit()
					admitted.Add(int64(n))
					continue
				}
				var be *sluice.BlockError
				if errors.As(err, &be) && be.Reason == "cluster fallback: block" {
					fallback.Add(1)
				}
				if n == 1 { // a unit refused: the month is used up
					return
				}
			}
		}()
	}
	wg.Wait()
	_ = enc.Encode(quotaLine{Admitted: int(admitted.Load()), Fallback: int(fallback.Load())})
	return 0
}

// TestQuotaProcessesShareMonth: two OS processes, four goroutines each,
// spend one monthly cluster quota of 1,000 units in batches of 1 and 2:
// together they admit exactly 1,000, and Redis counts 1,000.
func TestQuotaProcessesShareMonth(t *testing.T) {
	const limit, procs = 1000, 2
	srv := redistest.Start(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A zone whose month does not end during the test.
	zone, now := "UTC", time.Now().UTC()
	if now.Day() == 1 && now.Hour() < 2 || now.AddDate(0, 0, 1).Day() == 1 && now.Hour() >= 22 {
		zone = "Pacific/Kiritimati" // 14 hours ahead
	}
	start := time.Now().Add(2 * time.Second)
	spec, _ := json.Marshal(quotaSpec{Redis: srv.Addr(), Limit: limit, Zone: zone, Goroutines: 4, Start: start.UnixNano()})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	lines := make([]quotaLine, procs)
	var wg sync.WaitGroup
	for i := 0; i < procs; i++ {
		cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), envQuotaChild+"="+strconv.Itoa(i), envQuotaSpec+"="+string(spec))
		cmd.SysProcAttr = childProcAttr()
		cmd.Stderr = os.Stderr
		cmd.WaitDelay = time.Second
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				_ = json.Unmarshal(sc.Bytes(), &lines[i])
			}
			_ = cmd.Wait()
		}()
	}
	wg.Wait()
	total := 0
	for i, l := range lines {
		if l.Err != "" || l.Fallback != 0 {
			t.Fatalf("process %d: %+v", i, l)
		}
		total += l.Admitted
	}
	if total != limit {
		t.Fatalf("the processes admitted %d units of a quota of %d (%+v)", total, limit, lines)
	}
	rdb := srv.Client(t)
	keys := rdb.Keys(ctxT(t), "*plan/quota/api/month@"+zone+"/*").Val()
	if len(keys) != 1 {
		t.Fatalf("quota keys %v, want the month's one", keys)
	}
	if n, err := rdb.Get(ctxT(t), keys[0]).Int(); err != nil || n != limit {
		t.Fatalf("%s holds %d (%v), want %d", keys[0], n, err, limit)
	}
	t.Logf("the processes admitted %d and %d units; %s holds %d", lines[0].Admitted, lines[1].Admitted, keys[0], limit)
}
