package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// maxKeyBytes is the longest counter key kept as it is; longer keys (a
// request with huge values) are counted under a digest of themselves, so a
// counter costs a bounded amount of memory whatever the request.
const maxKeyBytes = 512

// counterKey is the counter's name for one descriptor under its limit in the
// window starting at windowStart (Unix seconds): envoyproxy/ratelimit's
// cache key (src/limiter/cache_key.go), "domain_key_value_key_value_start",
// with share_threshold patterns in place of the values they matched.
func counterKey(prefix, domain string, entries []*rlv3.RateLimitDescriptor_Entry, shares []string, windowStart int64) string {
	var b strings.Builder
	size := len(prefix) + len(domain) + 12
	for _, e := range entries {
		size += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	b.Grow(min(size, maxKeyBytes*4+64)) // one allocation
	b.WriteString(prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		if shares != nil && shares[i] != "" {
			b.WriteString(shares[i])
		} else {
			b.WriteString(e.GetValue())
		}
		b.WriteByte('_')
		if b.Len() > maxKeyBytes*4 {
			break // the digest below covers what was written; the rest only grows it
		}
	}
	b.WriteString(strconv.FormatInt(windowStart, 10))
	k := b.String()
	if len(k) <= maxKeyBytes {
		return k
	}
	return digestKey(prefix, domain, entries, shares, windowStart)
}

func digestKey(prefix, domain string, entries []*rlv3.RateLimitDescriptor_Entry, shares []string, windowStart int64) string {
	h := sha256.New()
	for i, e := range entries {
		h.Write([]byte(e.GetKey()))
		h.Write([]byte{0})
		v := e.GetValue()
		if shares != nil && shares[i] != "" {
			v = shares[i]
		}
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return prefix + domain + "_#" + hex.EncodeToString(h.Sum(nil)) + "_" + strconv.FormatInt(windowStart, 10)
}
