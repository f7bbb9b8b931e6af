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
	// Both values are built in one buffer on the stack and made one string
	// (a single allocation), which policy and state slice.
	var buf [2 * (2*maxPolicyName + 2 + 48)]byte
	out := appendSFString(buf[:0], b.Rule.ID)
	name := len(out)
	out = append(out, ";q="...)
	out = strconv.AppendInt(out, quota(b.Limit), 10)
	out = append(out, ";w="...)
	out = strconv.AppendInt(out, max(Seconds(b.Window), 1), 10)
	split := len(out)
	out = append(out, out[:name]...)
	out = append(out, ";r="...)
	out = strconv.AppendInt(out, max(b.Remaining, 0), 10)
	out = append(out, ";t="...)
	out = strconv.AppendInt(out, Seconds(b.Reset), 10)
	all := string(out)
	return all[:split], all[split:]
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

// appendSFString appends id to dst as a structured-field String (RFC 8941
// 3.3.3): quoted, with '"' and '\' escaped; a character outside printable
// ASCII becomes '_', and an ID longer than 64 bytes is cut. An empty id is
// "default".
func appendSFString(dst []byte, id string) []byte {
	if id == "" {
		id = DefaultPolicy
	}
	if len(id) > maxPolicyName {
		id = id[:maxPolicyName]
	}
	dst = append(dst, '"')
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '_')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
