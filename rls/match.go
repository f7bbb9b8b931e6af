package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match finds the limit of one request descriptor the way
// envoyproxy/ratelimit's GetLimit does (src/config/config_impl.go): walk the
// domain's tree entry by entry, trying "key_value", then the level's
// wildcard entries in file order, then the key-only entry; the limit
// applies only when the request's last entry lands on a descriptor with a
// rate_limit (a request with more or fewer entries than the config's path
// gets none). shares holds, for each entry matched through a
// share_threshold wildcard, the pattern that replaces its value in the
// counter's key ("" for the others); nil when there is none.
func (c *Config) match(domain string, entries []*rlv3.RateLimitDescriptor_Entry) (lim *Limit, shares []string) {
	nd := c.domains[domain]
	if nd == nil {
		return nil, nil
	}
	for i, e := range entries {
		full := e.GetKey() + "_" + e.GetValue()
		next := nd.children[full]
		if next == nil {
			for _, w := range nd.wildcards {
				if wildcardMatch(w.parts, full) {
					next = nd.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = nd.children[e.GetKey()]
		}
		if next == nil {
			return nil, nil
		}
		if next.share {
			if shares == nil {
				shares = make([]string, len(entries))
			}
			shares[i] = next.pattern
		}
		if i == len(entries)-1 {
			return next.limit, shares
		}
		if len(next.children) == 0 {
			return nil, nil
		}
		nd = next
	}
	return nil, nil
}

// wildcardMatch reports whether value matches a pattern split on "*", each
// "*" matching any run of bytes (as envoyproxy/ratelimit matches them).
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(value) < fixed {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

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
