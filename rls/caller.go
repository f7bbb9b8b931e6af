package rls

import (
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// caller is the caller of descriptor d of req (Options.CallerKey): the
// value of d's entry with the key, else of the first of req's
// descriptors that has one; "" without a key or such an entry.
func callerOf(key string, req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) string {
	if key == "" {
		return ""
	}
	if v, ok := entryValue(key, d); ok {
		return v
	}
	for _, o := range req.GetDescriptors() {
		if v, ok := entryValue(key, o); ok {
			return v
		}
	}
	return ""
}

func entryValue(key string, d *rlv3.RateLimitDescriptor) (string, bool) {
	for _, e := range d.GetEntries() {
		if e.GetKey() == key {
			return e.GetValue(), true
		}
	}
	return "", false
}
