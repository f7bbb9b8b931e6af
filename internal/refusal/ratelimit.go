package refusal

import (
	"math"
	"strconv"
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// The RateLimit header fields of draft-ietf-httpapi-ratelimit-headers
// (versions 08 to 10), and the older X-RateLimit-* trio, for a budget
// (core.Budget). The HTTP adapters send them as response headers, the gRPC
// adapter as response metadata. The other adapter modules hold generated
// copies of this file (go run ./internal/cmd/modules copies; the table is
// internal/cmd/modules/shared.go).

// Field names, canonical for HTTP; gRPC metadata uses them lower-cased.
const (
	PolicyField    = "RateLimit-Policy"
	RateLimitField = "RateLimit"
	XLimitField    = "X-Ratelimit-Limit"
	XRemainField   = "X-Ratelimit-Remaining"
	XResetField    = "X-Ratelimit-Reset"
)

// DefaultPolicy is the policy name of a rule without an ID.
const DefaultPolicy = "default"

// RateLimitFields returns the values of the RateLimit-Policy and
// RateLimit fields for b, a budget with a positive Limit:
//
//	RateLimit-Policy: "api";q=100;w=1
//	RateLimit: "api";r=42;t=1
//
// The policy's name is the rule's ID ("default" without one) as a
// structured-field String; q is the Limit rounded down, w the Window and t
// the Reset in whole seconds rounded up (w at least 1), r the Remaining.
func RateLimitFields(b core.Budget) (policy, state string) {
	name := sfString(b.Rule.ID)
	p := make([]byte, 0, len(name)+32)
	p = append(p, name...)
	p = append(p, ";q="...)
	p = strconv.AppendInt(p, quota(b.Limit), 10)
	p = append(p, ";w="...)
	p = strconv.AppendInt(p, max(Seconds(b.Window), 1), 10)
	s := make([]byte, 0, len(name)+32)
	s = append(s, name...)
	s = append(s, ";r="...)
	s = strconv.AppendInt(s, max(b.Remaining, 0), 10)
	s = append(s, ";t="...)
	s = strconv.AppendInt(s, Seconds(b.Reset), 10)
	return string(p), string(s)
}

// XRateLimitFields returns the values of X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset for b: the Limit rounded
// down, the Remaining, and the Reset in seconds from now, rounded up (not
// an instant: a client's clock may be off).
func XRateLimitFields(b core.Budget) (limit, remaining, reset string) {
	return strconv.FormatInt(quota(b.Limit), 10), strconv.FormatInt(max(b.Remaining, 0), 10), strconv.FormatInt(Seconds(b.Reset), 10)
}

// Seconds returns d in whole seconds, rounded up; 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// quota returns a Limit as a whole number of requests, rounded down.
func quota(l float64) int64 {
	if !(l > 0) {
		return 0
	}
	return int64(math.Min(math.Floor(l), 1<<53))
}

// maxPolicyName bounds the rule ID a policy name carries.
const maxPolicyName = 64

// sfString returns id as a structured-field String (RFC 8941 3.3.3):
// quoted, with '"' and '\' escaped; a character outside printable ASCII
// becomes '_', and an ID longer than 64 bytes is cut. An empty id is
// "default".
func sfString(id string) string {
	if id == "" {
		id = DefaultPolicy
	}
	if len(id) > maxPolicyName {
		id = id[:maxPolicyName]
	}
	b := make([]byte, 0, len(id)+2)
	b = append(b, '"')
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
