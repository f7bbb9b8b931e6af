package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRun: checkout pays, mallory and a request without a caller get 403;
// each service gets its 100 quotes and the partner its 1,000, the rest 429.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	require.Equal(t, `request      caller        sent  answers
POST /pay    checkout         3  200 x3
POST /pay    mallory          3  403 x3
POST /pay    (none)           3  403 x3
GET /quotes  svc-orders     120  200 x100, 429 x20
GET /quotes  svc-search     120  200 x100, 429 x20
GET /quotes  partner-bank  1100  200 x1000, 429 x100
`, out.String())
}
