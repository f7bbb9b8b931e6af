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
	// SeriesResources is the most resources of each frame kept in the
	// instance's list of frames (Frames), the busiest; only the newest
	// frame of each instance keeps MaxResources (Latest). Zero or less
	// means DefaultFrameResources, and it is at most MaxResources. With
	// MaxResources at 10,000, a kept second takes about 4 KB of Redis
	// instead of 790 KB, and Frames over a minute of 10 instances reads
	// about 2 MB instead of 470 MB.
	SeriesResources int
}

// Telemetry is the Redis implementation of cluster.Telemetry: per instance,
// a list of its last frames that expires when the instance stops
// publishing; per application, an index of its publishing instances. It is
// safe for concurrent use. Build it with NewTelemetry.
type Telemetry struct {
	c         redis.UniversalClient
	prefix    string
	maxRes    int
	seriesRes int
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
	t.seriesRes = cfg.SeriesResources
	if t.seriesRes <= 0 {
		t.seriesRes = DefaultFrameResources
	}
	t.seriesRes = min(t.seriesRes, t.maxRes)
	return t
}

// base returns "<prefix>:tm:{<app>}", the stem of app's telemetry keys.
func (t *Telemetry) base(app string) string {
	return t.prefix + ":tm:{" + escapeTag(app) + "}"
}

// Publish records f in two round trips: it pushes the frame, with its
// SeriesResources busiest resources, onto its instance's list, trims the
// list to keep frames (at most 3,600), keeps the frame whole (its
// MaxResources busiest) as the instance's newest, makes both expire ttl
// (rounded up to the millisecond) from now, and records the instance in
// the application's index until then, dropping the instances whose frames
// expired; then it records the application in the index of applications
// (Apps) until then too. A frame holds at most 1,000 breakers.
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
	whole, err := t.encode(&f, t.maxRes)
	if err != nil {
		return err
	}
	elem := whole
	if len(f.Resources) > t.seriesRes {
		if elem, err = t.encode(&f, t.seriesRes); err != nil {
			return err
		}
	}
	base := t.base(f.App)
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	err = publishScript.Run(ctx, t.c, []string{base + ":idx", base + ":f:" + f.Instance, base + ":l:" + f.Instance},
		f.Instance, elem, keep, int64(ms), whole).Err()
	if err != nil {
		return fmt.Errorf("sluiceredis: publish: %w", err)
	}
	if err := noteApp(ctx, t.c, t.appsKey(), f.App, ttl); err != nil {
		return fmt.Errorf("sluiceredis: publish: %w", err)
	}
	return nil
}

// encode returns f as stored, "<second> <json>", with its maxRes busiest
// resources.
func (t *Telemetry) encode(f *cluster.Frame, maxRes int) (string, error) {
	b, err := json.Marshal(toWire(f, maxRes))
	if err != nil {
		return "", fmt.Errorf("sluiceredis: publish: %w", err)
	}
	return strconv.FormatInt(f.Second, 10) + " " + string(b), nil
}

// Latest returns the newest frame of each of app's live instances, whole
// (up to MaxResources resources), by instance, in one round trip: what a
// table of every resource reads, instead of every kept frame.
func (t *Telemetry) Latest(ctx context.Context, app string) ([]cluster.Frame, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	base := t.base(app)
	vals, err := latestScript.Run(ctx, t.c, []string{base + ":idx"}, base+":l:").StringSlice()
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: latest %q: %w", app, err)
	}
	return t.decode(app, vals)
}

// decode reads stored frames, by instance then Second.
func (t *Telemetry) decode(app string, vals []string) ([]cluster.Frame, error) {
	out := make([]cluster.Frame, 0, len(vals))
	for _, v := range vals {
		_, body, ok := strings.Cut(v, " ")
		var w wireFrame
		if !ok || json.Unmarshal([]byte(body), &w) != nil {
			return nil, fmt.Errorf("sluiceredis: frames %q: malformed frame %q", app, cut(v, 80))
		}
		f, err := w.frame()
		if err != nil {
			return nil, fmt.Errorf("sluiceredis: frames %q: %w", app, err)
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b cluster.Frame) int {
		if c := strings.Compare(a.Instance, b.Instance); c != 0 {
			return c
		}
		return cmp.Compare(a.Second, b.Second)
	})
	return out, nil
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
	return t.decode(app, vals)
}

// wireFrame is a Frame as stored: JSON cannot hold the NaN readings of a
// system source that has not read yet, so they travel as null.
type wireFrame struct {
	App         string                 `json:"app"`
	Instance    string                 `json:"instance"`
	Second      int64                  `json:"second"`
	RuleVersion int64                  `json:"ruleVersion,omitempty"`
	ClusterMode string                 `json:"clusterMode,omitempty"`
	Resources   string                 `json:"res,omitempty"` // appendResources
	Breakers    []cluster.BreakerFrame `json:"breakers,omitempty"`
	Load1       *float64               `json:"load1"`
	CPUUsage    *float64               `json:"cpuUsage"`
	Memory      uint64                 `json:"memory"`
	Ages        [3]time.Duration       `json:"ages"`
	Shedding    bool                   `json:"shedding,omitempty"`
	// Callers is each resource's Callers, by resource (beside the
	// compact encoding, which has no room for a map).
	Callers map[string]map[string]uint64 `json:"callers,omitempty"`
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
	if len(res) > maxRes {
		res = slices.Clone(res)
		slices.SortStableFunc(res, func(a, b cluster.ResourceSecond) int {
			return cmp.Compare(b.Pass+b.Block, a.Pass+a.Block)
		})
		res = res[:maxRes]
	}
	br := f.Breakers
	if len(br) > maxFrameBreakers {
		br = br[:maxFrameBreakers]
	}
	s := f.System
	return wireFrame{
		App: f.App, Instance: f.Instance, Second: f.Second, RuleVersion: f.RuleVersion,
		ClusterMode: f.ClusterMode, Resources: string(appendResources(make([]byte, 0, 96*len(res)), res)), Breakers: br,
		Load1: finite(s.Load1), CPUUsage: finite(s.CPUUsage), Memory: s.Memory,
		Ages: [3]time.Duration{s.Load1Age, s.CPUUsageAge, s.MemoryAge}, Shedding: f.Shedding,
		Callers: wireCallers(res),
	}
}

// wireCallers returns the Callers of rs by resource, or nil when none has
// any.
func wireCallers(rs []cluster.ResourceSecond) map[string]map[string]uint64 {
	var m map[string]map[string]uint64
	for i := range rs {
		if len(rs[i].Callers) > 0 {
			if m == nil {
				m = map[string]map[string]uint64{}
			}
			m[rs[i].Resource] = rs[i].Callers
		}
	}
	return m
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func (w *wireFrame) frame() (cluster.Frame, error) {
	res, err := parseResources(w.Resources)
	if err != nil {
		return cluster.Frame{}, err
	}
	for i := range res {
		res[i].Callers = w.Callers[res[i].Resource]
	}
	return cluster.Frame{
		App: w.App, Instance: w.Instance, Second: w.Second, RuleVersion: w.RuleVersion,
		ClusterMode: w.ClusterMode, Resources: res, Breakers: w.Breakers,
		System: stat.System{
			Load1: orNaN(w.Load1), CPUUsage: orNaN(w.CPUUsage), Memory: w.Memory,
			Load1Age: w.Ages[0], CPUUsageAge: w.Ages[1], MemoryAge: w.Ages[2],
		},
		Shedding: w.Shedding,
	}, nil
}

// resourceFields is the number of figures after a resource's name in the
// compact encoding; oldResourceFields the number before ShadowBlock,
// AdaptiveLimit and Tier were added, which frames of older publishers
// still kept have (read as zeros for those three).
const (
	oldResourceFields = 9 + len(stat.Snapshot{}.BlockedBy)
	resourceFields    = oldResourceFields + 3
)

// appendResources appends rs in a compact text form, decoded about ten
// times faster than JSON objects: one line per resource, its name quoted
// as a Go string (so any bytes are escaped), then Start, Pass, Block,
// Complete, Error, AvgRT, MinRT (ns), MeanConcurrency (0 when not finite),
// Concurrency, BlockedBy, ShadowBlock, AdaptiveLimit and Tier, separated
// by spaces.
func appendResources(b []byte, rs []cluster.ResourceSecond) []byte {
	for i := range rs {
		r := &rs[i]
		b = strconv.AppendQuote(b, r.Resource)
		for _, v := range [...]int64{r.Start, int64(r.Pass), int64(r.Block), int64(r.Complete), int64(r.Error), int64(r.AvgRT), int64(r.MinRT)} {
			b = append(b, ' ')
			b = strconv.AppendInt(b, v, 10)
		}
		mc := r.MeanConcurrency
		if !isFinite(mc) {
			mc = 0
		}
		b = append(b, ' ')
		b = strconv.AppendFloat(b, mc, 'g', -1, 64)
		b = append(b, ' ')
		b = strconv.AppendInt(b, r.Concurrency, 10)
		for _, v := range r.BlockedBy {
			b = append(b, ' ')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.ShadowBlock, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, r.AdaptiveLimit, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(r.Tier), 10)
		b = append(b, '\n')
	}
	return b
}

// parseResources reads what appendResources wrote.
//
// complexity: parses the compact resource encoding field by field, each field's error named
func parseResources(s string) ([]cluster.ResourceSecond, error) {
	if s == "" {
		return nil, nil
	}
	out := make([]cluster.ResourceSecond, 0, strings.Count(s, "\n"))
	var f [resourceFields]string
	for len(s) > 0 {
		line, rest, _ := strings.Cut(s, "\n")
		s = rest
		q, err := strconv.QuotedPrefix(line)
		if err != nil {
			return nil, fmt.Errorf("malformed resource line %q", cut(line, 80))
		}
		name, _ := strconv.Unquote(q)
		line = line[len(q):]
		n := 0 // figures read
		for i := range f {
			if len(line) == 0 && i == oldResourceFields {
				break // an older publisher's line
			}
			if len(line) == 0 || line[0] != ' ' {
				return nil, fmt.Errorf("resource %q: %d figures, want %d", cut(name, 80), i, resourceFields)
			}
			n++
			line = line[1:]
			j := strings.IndexByte(line, ' ')
			if j < 0 {
				j = len(line)
			}
			f[i], line = line[:j], line[j:]
		}
		if line != "" {
			return nil, fmt.Errorf("resource %q: more than %d figures", cut(name, 80), resourceFields)
		}
		r := cluster.ResourceSecond{Resource: name}
		var ints [7]int64
		for i := range ints {
			if ints[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				return nil, fmt.Errorf("resource %q: %w", cut(name, 80), err)
			}
		}
		r.Start, r.Pass, r.Block, r.Complete, r.Error = ints[0], uint64(ints[1]), uint64(ints[2]), uint64(ints[3]), uint64(ints[4])
		r.AvgRT, r.MinRT = time.Duration(ints[5]), time.Duration(ints[6])
		if r.MeanConcurrency, err = strconv.ParseFloat(f[7], 64); err != nil {
			return nil, fmt.Errorf("resource %q: %w", cut(name, 80), err)
		}
		if r.Concurrency, err = strconv.ParseInt(f[8], 10, 64); err != nil {
			return nil, fmt.Errorf("resource %q: %w", cut(name, 80), err)
		}
		for i := range r.BlockedBy {
			if r.BlockedBy[i], err = strconv.ParseUint(f[9+i], 10, 64); err != nil {
				return nil, fmt.Errorf("resource %q: %w", cut(name, 80), err)
			}
		}
		if n == resourceFields {
			var tier int64
			if r.ShadowBlock, err = strconv.ParseUint(f[oldResourceFields], 10, 64); err == nil {
				if r.AdaptiveLimit, err = strconv.ParseInt(f[oldResourceFields+1], 10, 64); err == nil {
					tier, err = strconv.ParseInt(f[oldResourceFields+2], 10, 32)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("resource %q: %w", cut(name, 80), err)
			}
			r.Tier = int(tier)
		}
		out = append(out, r)
	}
	return out, nil
}
