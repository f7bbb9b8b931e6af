package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// maxRulesBatch caps a descriptor's hits_addend with sluice rules: an
// entry stands for at most 2^30 requests (sluice.WithBatch), far above any
// rule's threshold, so every larger value decides alike.
const maxRulesBatch = 1 << 30

// RulesService answers envoy.service.ratelimit.v3.RateLimitService with
// sluice's own rules (a rules.Set, as a sluice rule file writes it),
// decided by a sluice engine. A descriptor of a request for domain D with
// entries k1=v1 … kn=vn is the entry of one resource: D/k1/…/kn, where an
// entry is written kI=vI instead when a rule names a resource that way
// (the value tried before the key alone, entry by entry, as
// envoyproxy/ratelimit matches). The entry's arguments are the values
// v1 … vn in order, so a param rule with Index i limits per value of the
// descriptor's entry i. A descriptor that names no rule's resource answers
// OK without a limit; the others are entered with sluice.WithBudget, which
// fills current_limit, limit_remaining and duration_until_reset.
type RulesService struct {
	pb.UnimplementedRateLimitServiceServer
	eng     *sluice.Engine
	opts    Options
	index   atomic.Pointer[ruleIndex]
	metrics *metrics
}

// ruleIndex is the resource names of the rules in force, and every prefix
// of them that ends before a '/', for the walk that names a descriptor's
// resource.
type ruleIndex struct {
	names    map[string]bool
	prefixes map[string]bool
}

// NewRulesService returns a service deciding with eng's rules; it loads
// none (LoadRules does). Of opts, ResponseHeaders and ShadowMode apply;
// StopIncrementWhenOverLimit is not provided (every descriptor is counted,
// envoyproxy/ratelimit's default).
func NewRulesService(eng *sluice.Engine, opts Options) *RulesService {
	s := &RulesService{eng: eng, opts: opts, metrics: newMetrics()}
	s.index.Store(&ruleIndex{})
	return s
}

// LoadRules checks set and puts it in force in the engine (all or
// nothing: on an error the rules in force stay). Besides the engine's own
// checks it refuses what a decision that enters and leaves at once cannot
// enforce: concurrency rules, system rules and circuit breakers.
func (s *RulesService) LoadRules(set rules.Set) error {
	if err := checkRLSRules(&set); err != nil {
		return err
	}
	if err := s.eng.LoadRules(set); err != nil {
		return err
	}
	s.index.Store(indexRules(&set))
	return nil
}

func checkRLSRules(set *rules.Set) error {
	const why = "a ShouldRateLimit decision enters and leaves at once"
	if len(set.System) > 0 {
		return fmt.Errorf("rls: system rule 0: system rules are not provided (%s)", why)
	}
	if len(set.CircuitBreaker) > 0 {
		return fmt.Errorf("rls: circuitBreaker rule 0 (resource %q): circuit breakers are not provided (%s, reporting no error)", set.CircuitBreaker[0].Resource, why)
	}
	for i, f := range set.Flow {
		if f.Metric == rules.Concurrency {
			return fmt.Errorf("rls: flow rule %d (resource %q): field metric: concurrency limits nothing (%s)", i, f.Resource, why)
		}
	}
	for i, p := range set.Param {
		if p.Metric == rules.Concurrency {
			return fmt.Errorf("rls: param rule %d (resource %q): field metric: concurrency limits nothing (%s)", i, p.Resource, why)
		}
	}
	return nil
}

func indexRules(set *rules.Set) *ruleIndex {
	ix := &ruleIndex{names: map[string]bool{}, prefixes: map[string]bool{}}
	add := func(name string) {
		ix.names[name] = true
		for i := 0; i < len(name); i++ {
			if name[i] == '/' {
				ix.prefixes[name[:i]] = true
			}
		}
	}
	for _, f := range set.Flow {
		add(f.Resource)
	}
	for _, p := range set.Param {
		add(p.Resource)
	}
	for _, a := range set.Authority {
		add(a.Resource)
	}
	return ix
}

// resource names the resource of descriptor d of domain, "" when no rule
// names it. Each entry is written key=value when some rule's name goes on
// that way, else key; the strings built are bounded by the longest rule
// name plus one entry.
func (ix *ruleIndex) resource(domain string, d *rlv3.RateLimitDescriptor) string {
	name := domain
	for _, e := range d.GetEntries() {
		withValue := name + "/" + e.GetKey() + "=" + e.GetValue()
		keyOnly := name + "/" + e.GetKey()
		switch {
		case ix.prefixes[withValue] || ix.names[withValue]:
			name = withValue
		case ix.prefixes[keyOnly] || ix.names[keyOnly]:
			name = keyOnly
		default:
			return ""
		}
	}
	if !ix.names[name] {
		return ""
	}
	return name
}

// ShouldRateLimit enters each descriptor's resource in the engine and
// answers OVER_LIMIT when any is refused; every descriptor is counted,
// also after one was refused (envoyproxy/ratelimit's default).
func (s *RulesService) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	n := len(req.Descriptors)
	ix := s.index.Load()
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	var nearest *pb.RateLimitResponse_DescriptorStatus
	for i, d := range req.Descriptors {
		st, err := s.decide(ctx, req, ix, d)
		if err != nil {
			s.metrics.errors.Add(1)
			return nil, err
		}
		resp.Statuses[i] = st
		nearest = nearer(nearest, st)
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	if s.opts.ResponseHeaders && nearest != nil {
		resp.ResponseHeadersToAdd = budgetHeaders(nearest)
	}
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT && s.opts.ShadowMode {
		resp.OverallCode = pb.RateLimitResponse_OK
		s.metrics.globalShadow.Add(1)
	}
	s.metrics.request(resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT)
	return resp, nil
}

// checkRequest refuses a request without a domain, without descriptors or
// with more than MaxRequestDescriptors.
func checkRequest(req *pb.RateLimitRequest) error {
	n := len(req.GetDescriptors())
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case n == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case n > MaxRequestDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors, at most %d", n, MaxRequestDescriptors)
	}
	return nil
}

// nearer returns the status the response headers describe once st is
// seen: the first over-limit one with a limit, else the one with the least
// remaining.
func nearer(nearest, st *pb.RateLimitResponse_DescriptorStatus) *pb.RateLimitResponse_DescriptorStatus {
	switch {
	case st.CurrentLimit == nil || nearest != nil && nearest.Code == pb.RateLimitResponse_OVER_LIMIT:
		return nearest
	case st.Code == pb.RateLimitResponse_OVER_LIMIT:
		return st
	case nearest == nil || st.LimitRemaining < nearest.LimitRemaining:
		return st
	}
	return nearest
}

// decide enters one descriptor's resource.
func (s *RulesService) decide(ctx context.Context, req *pb.RateLimitRequest, ix *ruleIndex, d *rlv3.RateLimitDescriptor) (*pb.RateLimitResponse_DescriptorStatus, error) {
	ok := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	name := ix.resource(req.Domain, d)
	addend := hitsAddend(req, d)
	if name == "" || addend == 0 {
		return ok, nil
	}
	args := make([]any, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		args[i] = e.GetValue()
	}
	var b sluice.Budget
	opts := []sluice.EntryOption{sluice.WithArgs(args...), sluice.WithBatch(int(min(addend, maxRulesBatch))), sluice.WithBudget(&b)}
	if c := callerOf(s.opts.CallerKey, req, d); c != "" {
		opts = append(opts, sluice.WithCaller(c))
	}
	p, err := s.eng.EntryContext(ctx, name, opts...)
	var be *sluice.BlockError
	switch {
	case err == nil:
		p.Exit()
	case errors.As(err, &be):
		ok.Code = pb.RateLimitResponse_OVER_LIMIT
	case errors.Is(err, sluice.ErrBadCaller):
		return nil, status.Errorf(codes.InvalidArgument, "descriptor entry %q: %v", s.opts.CallerKey, err)
	default:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if b.Limit <= 0 {
		return ok, nil
	}
	ok.CurrentLimit = budgetLimit(name, &b)
	ok.LimitRemaining = uint32(min(max(b.Remaining, 0), math.MaxUint32))
	ok.DurationUntilReset = durationpb.New(b.Reset)
	return ok, nil
}

// units are Envoy's units sluice-rls reports a budget in.
var units = []struct {
	d time.Duration
	u pb.RateLimitResponse_RateLimit_Unit
}{
	{time.Second, pb.RateLimitResponse_RateLimit_SECOND},
	{time.Minute, pb.RateLimitResponse_RateLimit_MINUTE},
	{time.Hour, pb.RateLimitResponse_RateLimit_HOUR},
	{24 * time.Hour, pb.RateLimitResponse_RateLimit_DAY},
}

// budgetLimit is a budget as Envoy's RateLimit: Limit per unit when the
// budget's Window is one second, minute, hour or day; otherwise the rate
// Limit/Window in the smallest of those units in which it is a whole
// number (a token bucket of 4 refilled in 2 s is 2 a second); else Limit
// with unit UNKNOWN.
func budgetLimit(resource string, b *sluice.Budget) *pb.RateLimitResponse_RateLimit {
	name := b.Rule.ID
	if name == "" {
		name = resource
	}
	rl := &pb.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampU32(b.Limit), Unit: pb.RateLimitResponse_RateLimit_UNKNOWN}
	for _, u := range units {
		if b.Window == u.d {
			rl.Unit = u.u
			return rl
		}
	}
	if b.Window <= 0 {
		return rl
	}
	for _, u := range units {
		r := b.Limit * float64(u.d) / float64(b.Window)
		if r >= 1 && math.Abs(r-math.Round(r)) < 1e-6 {
			rl.RequestsPerUnit, rl.Unit = clampU32(math.Round(r)), u.u
			return rl
		}
	}
	return rl
}

func clampU32(f float64) uint32 { return uint32(min(max(math.Floor(f), 0), math.MaxUint32)) }

// budgetHeaders are the RateLimit-* headers of a status, its reset in
// whole seconds rounded up.
func budgetHeaders(st *pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := st.DurationUntilReset.AsDuration()
	secs := int64((reset + time.Second - 1) / time.Second)
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(secs, 10)},
	}
}

// rulesDescription summarises a set for the reload log.
func rulesDescription(set *rules.Set) string {
	var parts []string
	if n := len(set.Flow); n > 0 {
		parts = append(parts, strconv.Itoa(n)+" flow")
	}
	if n := len(set.Param); n > 0 {
		parts = append(parts, strconv.Itoa(n)+" param")
	}
	if len(parts) == 0 {
		return "no rules"
	}
	return strings.Join(parts, ", ")
}
