package sluicegin_test

import (
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/gin/internal/adaptertest"
)

// TestRefusalResponses refuses a request on a real server with each block
// type: the responses are the net/http adapter's (429 for rate limits, 503
// for overload, the policy's Retry-After, the status text as the body).
func TestRefusalResponses(t *testing.T) {
	for _, tt := range adaptertest.RefusalCases() {
		t.Run(tt.Name, func(t *testing.T) {
			g, _ := newEngine(t)
			ref := &adaptertest.Refuser{}
			require.NoError(t, g.RegisterSlot(ref, 0))
			var opts []sluicegin.Option
			if tt.Policy != nil {
				opts = append(opts, sluicegin.WithRefusalPolicy(*tt.Policy))
			}
			r := gin.New()
			r.Use(sluicegin.Middleware(g, opts...))
			r.GET("/x", func(c *gin.Context) { c.String(200, "x") })
			srv, c := serve(t, r)
			adaptertest.CheckRefusal(t, g, ref, c, srv.URL+"/x", tt)
		})
	}
}
