package sluicegin_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// The middleware enters each request under its route's name ("GET
// /orders/:id", whatever the id) and answers a refusal with 429.
func ExampleMiddleware() {
	gin.SetMode(gin.ReleaseMode)
	engine := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /orders/:id", Threshold: 2}}}); err != nil {
		panic(err)
	}
	r := gin.New()
	r.Use(sluicegin.Middleware(engine))
	r.GET("/orders/:id", func(c *gin.Context) { c.String(200, "order %s", c.Param("id")) })

	for _, id := range []string{"1", "2", "3"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/orders/"+id, nil))
		fmt.Println(w.Code)
	}
	// Output:
	// 200
	// 200
	// 429
}
