package dashboard

import (
	"context"
	"fmt"
)

// The applications page shows, per application, its health and traffic
// from what the instances already publish: the instances live (a
// heartbeat, or a frame of the last healthyWithin seconds) among those
// known (the rule reports too), whether the stores could be read, and
// the requests passed and blocked per second over the last trafficSeconds
// complete seconds, added up over the resources the frames carry (each
// instance's busiest, up to the publisher's cap).
const (
	trafficSeconds = 5
	// maxAppHealth bounds the applications a page reads the fleet of;
	// those beyond show a dash.
	maxAppHealth = 200
)

// appHealth is an application's health and traffic, as its row shows it.
type appHealth struct {
	Live, Known int
	// Pass and Block are requests per second.
	Pass, Block float64
	// Errors are the stores that could not be read; empty when all were.
	Errors []string
}

// Traffic writes the rates as the row shows them.
func (h *appHealth) Traffic() string {
	return fmt.Sprintf("%s/s passed, %s/s blocked", rate(h.Pass), rate(h.Block))
}

func rate(f float64) string {
	if f == float64(int64(f)) {
		return fmt.Sprint(int64(f))
	}
	return fmt.Sprintf("%.1f", f)
}

// healthOf reads app's health and traffic.
func (d *Dashboard) healthOf(ctx context.Context, app string) *appHealth {
	h := &appHealth{}
	now := d.cfg.Now().Unix()
	known, live := map[string]bool{}, map[string]bool{}
	if reps, err := d.store.Reports(ctx, app); err != nil {
		h.Errors = append(h.Errors, "rule store: "+err.Error())
	} else {
		for _, r := range reps {
			known[r.Instance] = true
		}
	}
	if d.cfg.Members != nil {
		if ms, err := d.cfg.Members.Members(ctx, app); err != nil {
			h.Errors = append(h.Errors, "heartbeats: "+err.Error())
		} else {
			for _, m := range ms {
				known[m.ID], live[m.ID] = true, true
			}
		}
	}
	if d.tel != nil {
		fs, err := d.tel.Frames(ctx, app, now-trafficSeconds)
		if err != nil {
			h.Errors = append(h.Errors, "telemetry: "+err.Error())
		}
		var pass, block uint64
		for _, f := range byInstanceSecond(fs) {
			if f.Second > now || f.Second < now-trafficSeconds {
				continue
			}
			known[f.Instance] = true
			if now-f.Second <= healthyWithin {
				live[f.Instance] = true
			}
			if f.Second == now {
				continue // the second under way: not complete
			}
			for i := range f.Resources {
				pass += f.Resources[i].Pass
				block += f.Resources[i].Block
			}
		}
		h.Pass, h.Block = float64(pass)/trafficSeconds, float64(block)/trafficSeconds
	}
	h.Known, h.Live = len(known), len(live)
	return h
}
