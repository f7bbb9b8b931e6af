package sluicehttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/adapters/http/internal/adaptertest"
	"github.com/sluice-go/sluice/internal/refusal"
)

// TestRefusalResponses refuses a request on a real server with each block
// type: rate limits get 429, overload 503, each with the Retry-After the
// policy gives, and a body that is the status text and nothing else.
func TestRefusalResponses(t *testing.T) {
	for _, tt := range adaptertest.RefusalCases() {
		t.Run(tt.Name, func(t *testing.T) {
			g, _ := newEngine(t)
			ref := &adaptertest.Refuser{}
			require.NoError(t, g.RegisterSlot(ref, 0))
			var opts []sluicehttp.Option
			if tt.Policy != nil {
				opts = append(opts, sluicehttp.WithRefusalPolicy(*tt.Policy))
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /x", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") })
			srv, c := serve(t, sluicehttp.Middleware(g, opts...)(mux))
			adaptertest.CheckRefusal(t, g, ref, c, srv.URL+"/x", tt)
		})
	}
}

func TestOverloadClassifies(t *testing.T) {
	for _, tt := range adaptertest.RefusalCases() {
		if tt.Policy != nil {
			continue
		}
		be := tt.BE
		require.Equal(t, tt.WantStatus == 503, be.Overloaded(), tt.Name)
		require.Equal(t, tt.WantStatus, refusal.DefaultStatus(&be), tt.Name)
	}
	require.False(t, (*sluice.BlockError)(nil).Overloaded())
	status, wait := refusal.Response(nil, 0, io.EOF)
	require.Equal(t, [2]int64{429, 0}, [2]int64{int64(status), wait}, "not a block error")
}
