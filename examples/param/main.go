// Command param shows a hot-parameter rule: each user of an HTTP endpoint
// gets 3 requests per minute (a VIP gets 6), counted apart, so one busy
// client is refused while the other keeps being served.
//
// It starts a local server on an ephemeral port, sends a fixed sequence of
// requests as two clients (X-User: alice and X-User: bob) and one VIP, prints
// each answer, and exits 0. Run it with:
//
//	go run ./examples/param
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

const resource = "GET /feed"

func main() {
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	eng := sluice.New()
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Param: []rules.Param{{
		Resource:   resource,
		Threshold:  3,
		Duration:   time.Minute,
		Exceptions: map[string]int64{"vip": 6},
	}}}); err != nil {
		return err
	}

	// The guard: the user named by the X-User header is the entry's first
	// argument, passed as a typed string (no interface, so no allocation;
	// a header longer than 85 bytes is tracked by a 16-byte fingerprint,
	// so long headers cannot pin memory). The HTTP, gin and gRPC adapters
	// do this with their argument extractors.
	feed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := eng.Entry(resource, sluice.WithStringArg(0, r.Header.Get("X-User")))
		var be *sluice.BlockError
		if errors.As(err, &be) {
			w.Header().Set("Retry-After", fmt.Sprint(int(be.RetryAfter.Seconds()+0.999)))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		if err == nil {
			defer p.Exit()
		}
		_, _ = io.WriteString(w, "feed for "+r.Header.Get("X-User"))
	})
	srv := httptest.NewServer(feed)
	defer srv.Close()

	ok := map[string]int{}
	for _, user := range []string{"alice", "alice", "alice", "alice", "bob", "alice", "bob", "vip", "vip", "vip", "vip", "vip", "vip", "vip", "bob"} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-User", user)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		line := fmt.Sprintf("%-5s -> %d", user, resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			ok[user]++
			line += " " + string(body)
		} else {
			line += " retry after " + resp.Header.Get("Retry-After") + "s"
		}
		fmt.Println(line)
	}
	fmt.Printf("served: alice %d, bob %d, vip %d\n", ok["alice"], ok["bob"], ok["vip"])
	if ok["alice"] != 3 || ok["bob"] != 3 || ok["vip"] != 6 {
		return fmt.Errorf("unexpected admissions %v", ok)
	}
	return nil
}
