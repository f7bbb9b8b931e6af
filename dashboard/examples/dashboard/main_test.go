package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe to write and read from two goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemo runs the demo for a few seconds and reaches its dashboard.
func TestDemo(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no redis-server on PATH")
		}
		t.Skip("no redis-server on PATH: apt-get install redis-server to run this test")
	}
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), []string{"-listen", "127.0.0.1:0", "-duration", "4s"}, &out) }()
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	require.Eventually(t, func() bool { return url.MatchString(out.String()) }, 20*time.Second, 20*time.Millisecond)
	res, err := http.Get(url.FindString(out.String()) + "login")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop after its -duration")
	}
	require.Contains(t, out.String(), "viewer  log in as viewer / viewer-demo")
	require.Contains(t, out.String(), "editor  log in as editor / editor-demo")
}

// TestDemoRulesMeasureTheHost: the demo's rules have a system rule on
// load1 or CPU usage, without which its instances measure neither (and
// the dashboard's Load, CPU and Memory columns show a dash).
func TestDemoRulesMeasureTheHost(t *testing.T) {
	set, err := rules.Decode([]byte(rulesV1), rules.YAML)
	require.NoError(t, err)
	var found bool
	for _, r := range set.System {
		found = found || r.Metric == rules.Load1 || r.Metric == rules.CPUUsage
	}
	require.True(t, found, "no system rule on load1 or cpu-usage in the demo's rules")
	eng := sluice.New()
	defer eng.Close()
	err = eng.LoadRules(set)
	require.NoError(t, err)
}
