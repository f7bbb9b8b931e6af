package sluiceredis

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/stat"
)

// Defaults and bounds of a Telemetry.
const (
	// DefaultFrameResources is the most resources a frame keeps when
	// TelemetryConfig.MaxResources is zero.
	DefaultFrameResources = 50
	// maxFrameBreakers is the most circuit breakers a frame keeps.
	maxFrameBreakers = 1000
	// maxKeep is the most frames Publish keeps per instance (an hour).
	maxKeep = 3600
)

// TelemetryConfig configures a Telemetry. The zero value is usable.
type TelemetryConfig struct {
	// Prefix starts every key the Telemetry writes; empty means
	// DefaultPrefix. Braces and '%' are escaped, as WithPrefix does.
	Prefix string
	// MaxResources is the most resources a stored frame holds: Publish
	// keeps the busiest (by passed plus refused requests). Zero or less
	// means DefaultFrameResources.
	MaxResources int
}

// Telemetry is the Redis implementation of cluster.Telemetry: per instance,
// a list of its last frames that expires when the instance stops
// publishing; per application, an index of its publishing instances. It is
// safe for concurrent use. Build it with NewTelemetry.
type Telemetry struct {
	c      redis.UniversalClient
	prefix string
	maxRes int
}

var _ cluster.Telemetry = (*Telemetry)(nil)

// NewTelemetry returns a Telemetry keeping frames in the Redis that client
// reaches. It does not contact Redis. Closing client is the caller's
// business.
func NewTelemetry(client redis.UniversalClient, cfg TelemetryConfig) *Telemetry {
	t := &Telemetry{c: client, prefix: DefaultPrefix, maxRes: cfg.MaxResources}
	if cfg.Prefix != "" {
		t.prefix = escapeTag(cfg.Prefix)
	}
	if t.maxRes <= 0 {
		t.maxRes = DefaultFrameResources
	}
	return t
}

// base returns "<prefix>:tm:{<app>}", the stem of app's telemetry keys.
func (t *Telemetry) base(app string) string {
	return t.prefix + ":tm:{" + escapeTag(app) + "}"
}

// Publish records f in one round trip: it pushes the frame onto its
// instance's list, trims the list to keep frames (at most 3,600), makes it
// expire ttl (rounded up to the millisecond) from now, and records the
// instance in the application's index until then, dropping the instances
// whose frames expired. A frame holds at most the configured MaxResources
// resources (the busiest) and 1,000 breakers.
func (t *Telemetry) Publish(ctx context.Context, f cluster.Frame, keep int, ttl time.Duration) error {
	if err := checkName("app", f.App); err != nil {
		return err
	}
	if err := checkName("instance", f.Instance); err != nil {
		return err
	}
	if keep < 1 || ttl <= 0 {
		return fmt.Errorf("sluiceredis: publish: keep %d or ttl %v not positive", keep, ttl)
	}
	keep = min(keep, maxKeep)
	b, err := json.Marshal(toWire(&f, t.maxRes))
	if err != nil {
		return fmt.Errorf("sluiceredis: publish: %w", err)
	}
	elem := strconv.FormatInt(f.Second, 10) + " " + string(b)
	base := t.base(f.App)
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	err = publishScript.Run(ctx, t.c, []string{base + ":idx", base + ":f:" + f.Instance},
		f.Instance, elem, keep, int64(ms)).Err()
	if err != nil {
		return fmt.Errorf("sluiceredis: publish: %w", err)
	}
	return nil
}

// Frames returns the kept frames of app's live instances whose Second is
// at least since, by instance then Second, in one round trip. Each
// instance's frames are read newest first and up to the first older than
// since, so an instance is expected to publish its seconds in order.
func (t *Telemetry) Frames(ctx context.Context, app string, since int64) ([]cluster.Frame, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	base := t.base(app)
	vals, err := framesScript.Run(ctx, t.c, []string{base + ":idx"}, base+":f:", since).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: frames %q: %w", app, err)
	}
	out := make([]cluster.Frame, 0, len(vals))
	for _, v := range vals {
		_, body, ok := strings.Cut(v, " ")
		var w wireFrame
		if !ok || json.Unmarshal([]byte(body), &w) != nil {
			return nil, fmt.Errorf("sluiceredis: frames %q: malformed frame %q", app, cut(v, 80))
		}
		out = append(out, w.frame())
	}
	slices.SortStableFunc(out, func(a, b cluster.Frame) int {
		if c := strings.Compare(a.Instance, b.Instance); c != 0 {
			return c
		}
		return cmp.Compare(a.Second, b.Second)
	})
	return out, nil
}

// wireFrame is a Frame as stored: JSON cannot hold the NaN readings of a
// system source that has not read yet, so they travel as null.
type wireFrame struct {
	App         string                   `json:"app"`
	Instance    string                   `json:"instance"`
	Second      int64                    `json:"second"`
	RuleVersion int64                    `json:"ruleVersion,omitempty"`
	ClusterMode string                   `json:"clusterMode,omitempty"`
	Resources   []cluster.ResourceSecond `json:"resources,omitempty"`
	Breakers    []cluster.BreakerFrame   `json:"breakers,omitempty"`
	Load1       *float64                 `json:"load1"`
	CPUUsage    *float64                 `json:"cpuUsage"`
	Memory      uint64                   `json:"memory"`
	Ages        [3]time.Duration         `json:"ages"`
	Shedding    bool                     `json:"shedding,omitempty"`
}

func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// toWire returns f as stored, with at most maxRes resources (the busiest)
// and maxFrameBreakers breakers. f is not modified.
func toWire(f *cluster.Frame, maxRes int) wireFrame {
	res := f.Resources
	if len(res) > maxRes || slices.ContainsFunc(res, func(r cluster.ResourceSecond) bool { return !isFinite(r.MeanConcurrency) }) {
		res = slices.Clone(res)
		slices.SortStableFunc(res, func(a, b cluster.ResourceSecond) int {
			return cmp.Compare(b.Pass+b.Block, a.Pass+a.Block)
		})
		res = res[:min(len(res), maxRes)]
		for i := range res {
			if !isFinite(res[i].MeanConcurrency) {
				res[i].MeanConcurrency = 0
			}
		}
	}
	br := f.Breakers
	if len(br) > maxFrameBreakers {
		br = br[:maxFrameBreakers]
	}
	s := f.System
	return wireFrame{
		App: f.App, Instance: f.Instance, Second: f.Second, RuleVersion: f.RuleVersion,
		ClusterMode: f.ClusterMode, Resources: res, Breakers: br,
		Load1: finite(s.Load1), CPUUsage: finite(s.CPUUsage), Memory: s.Memory,
		Ages: [3]time.Duration{s.Load1Age, s.CPUUsageAge, s.MemoryAge}, Shedding: f.Shedding,
	}
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func (w *wireFrame) frame() cluster.Frame {
	return cluster.Frame{
		App: w.App, Instance: w.Instance, Second: w.Second, RuleVersion: w.RuleVersion,
		ClusterMode: w.ClusterMode, Resources: w.Resources, Breakers: w.Breakers,
		System: stat.System{
			Load1: orNaN(w.Load1), CPUUsage: orNaN(w.CPUUsage), Memory: w.Memory,
			Load1Age: w.Ages[0], CPUUsageAge: w.Ages[1], MemoryAge: w.Ages[2],
		},
		Shedding: w.Shedding,
	}
}
