package dashboard

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard/internal/agent"
)

// Routes returns the method and pattern of every endpoint, and whether it
// is public, for the authorization matrix's completeness check.
func (d *Dashboard) Routes() (out [][3]string) {
	for _, rt := range d.routes {
		acc := map[access]string{public: "public", read: "read", write: "write", admin: "admin", signedIn: "signed-in"}[rt.access]
		out = append(out, [3]string{rt.method, rt.pattern, acc})
	}
	return out
}

// Sample publishes a frame of the Engine now, as the sampler does each
// second.
func (d *Dashboard) Sample() { d.sampler.Publish(context.Background()) }

// Sessions returns the number of sessions kept.
func (d *Dashboard) Sessions() int { return d.sessions.len() }

// Follow makes eng an instance id of app until ctx ends (see agent.Follow).
func Follow(ctx context.Context, eng *sluice.Engine, rs cluster.RuleStore, tel cluster.Telemetry, app, id string) (wait func()) {
	return agent.Follow(ctx, eng, rs, tel, app, id, 100*time.Millisecond)
}
