// Command rule-file shows sluice loading its rules from a YAML file and
// following edits of that file while traffic flows.
//
// It copies rules.yaml to a temporary directory, follows the copy
// (fleet.RuleFile), and makes an entry on "GET /hello" every 20 ms. Mid-run
// it rewrites the file twice: first with a higher threshold, which is
// applied at the next check, then with a broken rule, which is refused
// (the follower's status says why) while the rules in force stay. It runs for about three seconds and exits 0, or exits 1 if a step
// does not happen.
//
//	go run ./examples/rule-file
package main

import (
	_ "embed"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/fleet"
)

//go:embed rules.yaml
var sample []byte

const resource = "GET /hello"

func main() {
	if err := run(); err != nil {
		log.Printf("rule-file: %v", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "sluice-rule-file-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	if err := writeAtomically(path, sample); err != nil {
		return err
	}

	g := sluice.New()
	defer g.Close()
	m, err := fleet.Join(g, fleet.Config{App: "hello", Rules: fleet.RuleFile(path), CheckInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer m.Close()
	if st := m.Status(); st.Version == 0 { // start only with the file's rules
		return fmt.Errorf("%s: %v", path, errors.Join(st.Err, st.RefusedErr))
	}
	set := g.Rules()
	fmt.Printf("loaded %s: %d rules, %s threshold %v/s\n", path, len(set.Flow)+len(set.System)+len(set.CircuitBreaker)+len(set.Param), resource, threshold(g))
	traffic(g, time.Second)

	// 1. A valid edit: the threshold goes from 5 to 20.
	edited := strings.Replace(string(sample), "threshold: 5 ", "threshold: 20", 1)
	if err := writeAtomically(path, []byte(edited)); err != nil {
		return err
	}
	if !waitFor(2*time.Second, func() bool { return threshold(g) == 20 }) {
		return errors.New("the edited file was not applied")
	}
	fmt.Printf("change applied: %s threshold %v/s\n", resource, threshold(g))
	traffic(g, time.Second)

	// 2. A broken edit: a negative threshold. It is refused whole.
	broken := strings.Replace(edited, "threshold: 20", "threshold: -1", 1)
	if err := writeAtomically(path, []byte(broken)); err != nil {
		return err
	}
	if !waitFor(2*time.Second, func() bool { return m.Status().Refused != 0 }) {
		return errors.New("the broken file was not refused")
	}
	fmt.Printf("broken file refused: %v\n", m.Status().RefusedErr)
	if threshold(g) != 20 {
		return fmt.Errorf("the rules in force changed to threshold %v", threshold(g))
	}
	fmt.Printf("rules in force kept: %s threshold %v/s\n", resource, threshold(g))
	traffic(g, time.Second)
	return nil
}

// traffic makes an entry every 20 ms for d and prints how many passed.
func traffic(g *sluice.Engine, d time.Duration) {
	passed, blocked := 0, 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		p, err := g.Entry(resource)
		if err != nil {
			blocked++
			continue
		}
		passed++
		p.Exit()
	}
	fmt.Printf("  %v of traffic on %s: %d passed, %d blocked\n", d, resource, passed, blocked)
}

func threshold(g *sluice.Engine) float64 {
	for _, r := range g.Rules().Flow {
		if r.Resource == resource {
			return r.Threshold
		}
	}
	return 0
}

func waitFor(limit time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// writeAtomically replaces path with data by writing a temporary file and
// renaming it, so the watcher never reads half a file.
func writeAtomically(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
