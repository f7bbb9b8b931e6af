package rls

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/rls/config"
)

// MaxDescriptors bounds the descriptors of one request the service looks
// at; a request with more is refused with InvalidArgument (Envoy sends one
// descriptor per rate_limits action of a route, a handful).
const MaxRequestDescriptors = 10_000

// Options tunes a Service. The zero value is envoyproxy/ratelimit's
// defaults.
type Options struct {
	// ResponseHeaders adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset to every answer with a limit, for the descriptor
	// closest to its limit (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
	// StopIncrementWhenOverLimit makes a request that one descriptor
	// refuses count only on the descriptors over their limit, so that it
	// does not use the others' budgets (envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). Off, every descriptor of
	// every request is counted, as envoyproxy/ratelimit does by default.
	StopIncrementWhenOverLimit bool
	// ShadowMode answers OK to every request while counting as usual
	// (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxKeys bounds the counters kept in memory; zero means 2^20.
	MaxKeys int
	// CallerKey, with sluice rules (RulesService), names the descriptor
	// entry whose value is the caller (sluice.WithCaller) of the
	// descriptor's entry, for authority rules and per-caller flow rules:
	// the descriptor's own entry with that key, else the first of the
	// request's descriptors that has one. The entry stays part of the
	// resource's name and arguments. Empty means no caller.
	CallerKey string
}

// Service answers envoy.service.ratelimit.v3.RateLimitService: it is the
// whole decision logic of sluice-rls, usable in a program's own gRPC server.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	cfg      atomic.Pointer[config.Config]
	counters counters
	opts     Options
	now      func() time.Time
	metrics  *metrics
}

// NewService returns a service deciding with cfg on counters kept in this
// process (each replica has its own).
func NewService(cfg *config.Config, opts Options) *Service {
	return newService(cfg, opts, newLocalCounters(opts.MaxKeys))
}

func newService(cfg *config.Config, opts Options, c counters) *Service {
	s := &Service{counters: c, opts: opts, now: opts.Now, metrics: newMetrics()}
	if s.now == nil {
		s.now = time.Now
	}
	s.cfg.Store(cfg)
	return s
}

// SetConfig replaces the config in force; counters carry over by key, so
// an unchanged limit keeps its counts.
func (s *Service) SetConfig(cfg *config.Config) { s.cfg.Store(cfg) }

// Config returns the config in force.
func (s *Service) Config() *config.Config { return s.cfg.Load() }

// descriptor is the service's view of one request descriptor.
type descriptor struct {
	limit     *config.Limit
	shares    []string
	metricKey string // with detailed_metric: the limit's key with the request's values
	unlimited bool
	addend    uint64
	after     uint64 // the count after this request
	over      bool
}

// ShouldRateLimit decides one request as envoyproxy/ratelimit does
// (src/service/ratelimit.go): each descriptor is matched to a limit,
// unlimited ones answer OK uncounted, limits named in another matched
// limit's replaces are dropped, the others are counted in their fixed
// window; the request is OVER_LIMIT when any descriptor (not in shadow or
// quota mode) is, or when every quota descriptor is.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	n := len(req.GetDescriptors())
	if n == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if n > MaxRequestDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors, at most %d", n, MaxRequestDescriptors)
	}
	now := s.now().Unix()
	ds := s.limits(req)
	if err := s.count(ctx, now, req, ds); err != nil {
		s.metrics.errors.Add(1)
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return s.respond(now, ds), nil
}

// limits matches every descriptor and applies unlimited and replaces.
func (s *Service) limits(req *pb.RateLimitRequest) []descriptor {
	cfg := s.cfg.Load()
	ds := make([]descriptor, len(req.Descriptors))
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		ds[i].addend = hitsAddend(req, d)
		if ov := d.GetLimit(); ov != nil {
			// A limit set in Envoy's route config overrides the config's
			// and is never in shadow mode (as in envoyproxy/ratelimit).
			u := config.Unit(ov.GetUnit())
			if u.Seconds() > 0 {
				ds[i].limit = &config.Limit{Key: overrideKey(req.Domain, d), RequestsPerUnit: ov.GetRequestsPerUnit(), Unit: u}
			}
			continue
		}
		lim, shares := cfg.Match(req.Domain, len(d.GetEntries()), func(i int) (string, string) {
			e := d.GetEntries()[i]
			return e.GetKey(), e.GetValue()
		})
		if lim == nil {
			continue
		}
		for _, r := range lim.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		if lim.Unlimited {
			ds[i].unlimited = true
			continue
		}
		ds[i].limit, ds[i].shares = lim, shares
		if lim.Detailed {
			ds[i].metricKey = overrideKey(req.Domain, d)
		}
	}
	for i := range ds {
		if l := ds[i].limit; l != nil && l.Name != "" && replaced[l.Name] {
			ds[i].limit = nil
		}
	}
	return ds
}

// maxAddend caps a request's hits on one descriptor: above the largest
// limit (2^32-1) every value decides alike, and counts stay far from
// overflowing (Redis refuses an INCRBY past 2^63-1).
const maxAddend = 1 << 32

func hitsAddend(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return min(h.GetValue(), maxAddend)
	}
	return min(max(1, uint64(req.GetHitsAddend())), maxAddend)
}

// overrideKey names a limit Envoy sent with the descriptor, as
// envoyproxy/ratelimit's descriptorKey does.
func overrideKey(domain string, d *rlv3.RateLimitDescriptor) string {
	k := domain + "."
	for i, e := range d.GetEntries() {
		if i > 0 {
			k += "."
		}
		k += e.GetKey()
		if e.GetValue() != "" {
			k += "_" + e.GetValue()
		}
		if len(k) > maxKeyBytes {
			return domain + ".override"
		}
	}
	return k
}

// count adds the request's hits to the counters of its limited descriptors.
// With StopIncrementWhenOverLimit, it first reads them; when any would go
// over, only those are counted (envoyproxy/ratelimit's
// src/redis/fixed_cache_impl.go does the same with GET, then INCRBY).
func (s *Service) count(ctx context.Context, now int64, req *pb.RateLimitRequest, ds []descriptor) error {
	var hits []hit
	var idx []int
	var after []uint64
	if len(ds) <= len(countBuf{}.hits) {
		// The usual request, a descriptor or two: one allocation.
		b := &countBuf{}
		hits, idx, after = b.hits[:0], b.idx[:0], b.after[:]
	} else {
		hits, idx, after = make([]hit, 0, len(ds)), make([]int, 0, len(ds)), make([]uint64, len(ds))
	}
	for i := range ds {
		l := ds[i].limit
		if l == nil {
			continue
		}
		sec := l.Unit.Seconds()
		start := now / sec * sec
		hits = append(hits, hit{
			Key:     counterKey("", req.Domain, req.Descriptors[i].GetEntries(), ds[i].shares, start),
			Addend:  ds[i].addend,
			Expires: start + sec,
			Limit:   uint64(l.RequestsPerUnit),
		})
		idx = append(idx, i)
	}
	if len(hits) == 0 {
		return nil
	}
	after = after[:len(hits)]
	if s.opts.StopIncrementWhenOverLimit {
		addends := make([]uint64, len(hits))
		for j := range hits {
			addends[j], hits[j].Addend = hits[j].Addend, 0
		}
		if err := s.counters.Add(ctx, now, hits, after); err != nil {
			return err
		}
		anyOver := false
		for j, h := range addends {
			if after[j]+h > uint64(ds[idx[j]].limit.RequestsPerUnit) {
				anyOver = true
			}
		}
		for j, h := range addends {
			if !anyOver || after[j]+h > uint64(ds[idx[j]].limit.RequestsPerUnit) {
				hits[j].Addend = h
			}
		}
	}
	if err := s.counters.Add(ctx, now, hits, after); err != nil {
		return err
	}
	for j, i := range idx {
		ds[i].after = after[j]
		// Not counted (another descriptor was over): over only when it
		// already was, as in envoyproxy/ratelimit.
		ds[i].over = after[j] > uint64(ds[i].limit.RequestsPerUnit)
	}
	return nil
}

// countBuf holds count's slices for a request of up to two descriptors.
type countBuf struct {
	hits  [2]hit
	idx   [2]int
	after [2]uint64
}

// respond builds the answer from the counted descriptors.
func (s *Service) respond(now int64, ds []descriptor) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(ds))}
	for i := range ds {
		resp.Statuses[i] = s.status(now, &ds[i])
	}
	over, minimum := verdict(ds, resp.Statuses)
	resp.OverallCode = pb.RateLimitResponse_OK
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.ResponseHeaders && minimum != nil {
		resp.ResponseHeadersToAdd = headers(minimum)
	}
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT && s.opts.ShadowMode {
		resp.OverallCode = pb.RateLimitResponse_OK
		s.metrics.globalShadow.Add(1)
	}
	s.metrics.request(resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT)
	return resp
}

// verdict tells whether a request is over its limits (any descriptor not
// in quota mode over, or every quota descriptor over), and which status the
// response headers describe: the first over-limit one, else the one with
// the least remaining (envoyproxy/ratelimit's choice).
func verdict(ds []descriptor, sts []*pb.RateLimitResponse_DescriptorStatus) (over bool, minimum *pb.RateLimitResponse_DescriptorStatus) {
	minRemaining := uint32(math.MaxUint32)
	failed, quotas, quotasFailed := 0, 0, 0
	for i, st := range sts {
		if ds[i].unlimited {
			continue
		}
		if st.CurrentLimit != nil && st.LimitRemaining < minRemaining {
			minimum, minRemaining = st, st.LimitRemaining
		}
		quota := ds[i].limit != nil && ds[i].limit.Quota
		if quota {
			quotas++
		}
		switch {
		case st.Code != pb.RateLimitResponse_OVER_LIMIT:
		case quota:
			quotasFailed++
		default:
			failed++
			minimum, minRemaining = st, 0
		}
	}
	return failed > 0 || quotas > 0 && quotas == quotasFailed, minimum
}

// headers are envoyproxy/ratelimit's response headers for the descriptor
// nearest its limit.
func headers(st *pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)},
	}
}

// status is one descriptor's answer, with its metrics counted.
func (s *Service) status(now int64, d *descriptor) *pb.RateLimitResponse_DescriptorStatus {
	if d.unlimited {
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	l := d.limit
	if l == nil {
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	}
	sec := l.Unit.Seconds()
	st := &pb.RateLimitResponse_DescriptorStatus{
		Code: pb.RateLimitResponse_OK,
		CurrentLimit: &pb.RateLimitResponse_RateLimit{
			Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(l.Unit),
		},
		DurationUntilReset: &durationpb.Duration{Seconds: sec - now%sec},
	}
	if d.over {
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	} else {
		st.LimitRemaining = uint32(uint64(l.RequestsPerUnit) - min(d.after, uint64(l.RequestsPerUnit)))
	}
	s.metrics.limit(l, d)
	if d.over && l.Shadow {
		st.Code = pb.RateLimitResponse_OK
	}
	return st
}
