package sluicehttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// The middleware enters each request under its route's name ("GET
// /orders/{id}", whatever the id) and answers a refusal with 429 and
// Retry-After.
func ExampleMiddleware() {
	engine := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /orders/{id}", Threshold: 2}}}); err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "order", r.PathValue("id"))
	})
	h := sluicehttp.Middleware(engine)(mux)

	for _, id := range []string{"1", "2", "3"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/orders/"+id, nil))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println(w.Code, "Retry-After:", ra)
			continue
		}
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// 200
	// 429 Retry-After: 1
}
