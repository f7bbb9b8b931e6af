// Command chi shows sluicechi limiting a chi route: a flow rule admits 3
// requests per second to GET /users/{id}, whatever the id, and the rest get
// 429 with a Retry-After header. It serves on 127.0.0.1, sends a burst of
// requests to itself, prints what came back and exits.
//
//	go run ./adapters/chi/example                                    # in the repository
//	go run github.com/sluice-go/sluice/adapters/chi/example@latest  # anywhere
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/rules"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run writes what happened to w. opts are the engines' options (the test
// gives them a manual clock, so that a slow host cannot start a new second
// between the requests).
func run(w io.Writer, opts ...sluice.Option) error {
	engine := sluice.New(opts...)
	defer engine.Close()
	// One rule for the route template: /users/1, /users/2... share it.
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /users/{id}", Threshold: 3}}}); err != nil {
		return err
	}

	r := chi.NewRouter()
	r.Use(middleware.Recoverer, sluicechi.Middleware(engine))
	r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "user %s", chi.URLParam(r, "id"))
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	client := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + lis.Addr().String()
	admitted := 0
	for id := 1; id <= 6; id++ {
		resp, err := client.Get(fmt.Sprintf("%s/users/%d", base, id))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		line := fmt.Sprintf("GET /users/%d -> %d %s", id, resp.StatusCode, strings.TrimSpace(string(body)))
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			line += " (Retry-After: " + ra + ")"
		}
		fmt.Fprintln(w, line)
		if resp.StatusCode == http.StatusOK {
			admitted++
		}
	}
	if s, ok := engine.Snapshot("GET /users/{id}"); ok {
		fmt.Fprintf(w, "resource %q: %d passed, %d blocked\n", "GET /users/{id}", s.TotalPass, s.TotalBlock)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if admitted != 3 {
		return fmt.Errorf("expected 3 admitted requests, got %d", admitted)
	}
	return nil
}
