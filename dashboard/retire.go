package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// maxFleetApps bounds the applications found from the fleet that a page
// lists (the stores bound their indexes too).
const maxFleetApps = 1000

// appLister is a store that lists applications: the telemetry of the fleet
// (frames) and the store of its heartbeats (Members) may be one.
type appLister interface {
	Apps(ctx context.Context) ([]string, error)
}

// retirer is a rule store that can retire an application.
type retirer interface {
	Retire(ctx context.Context, app, user string) error
}

// fleetApps returns the applications whose instances publish frames or
// heartbeats, sorted, at most maxFleetApps, and the errors met.
func (d *Dashboard) fleetApps(ctx context.Context) ([]string, []string) {
	var names, errs []string
	add := func(what string, l any) {
		al, ok := l.(appLister)
		if !ok || l == nil {
			return
		}
		apps, err := al.Apps(ctx)
		if err != nil {
			errs = append(errs, what+": "+err.Error())
			return
		}
		names = append(names, apps...)
	}
	if d.tel != nil {
		add("the telemetry", d.tel)
	}
	if d.cfg.Members != nil {
		add("the heartbeats", d.cfg.Members)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	return names[:min(len(names), maxFleetApps)], errs
}

// liveInstances returns the instances of app seen in the last minute: a
// rule report, a heartbeat or a frame.
func (d *Dashboard) liveInstances(ctx context.Context, app string) ([]string, error) {
	var ids []string
	reps, err := d.store.Reports(ctx, app)
	if err != nil {
		return nil, err
	}
	for _, r := range reps {
		ids = append(ids, r.Instance)
	}
	if d.cfg.Members != nil {
		ms, err := d.cfg.Members.Members(ctx, app)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
	}
	if d.tel != nil {
		fs, err := d.tel.Frames(ctx, app, d.cfg.Now().Add(-time.Minute).Unix())
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			ids = append(ids, f.Instance)
		}
	}
	sort.Strings(ids)
	return slices.Compact(ids), nil
}

// retire retires an application (admins only): its rules, their history
// and the instances' reports are deleted, its audit entries kept and the
// retirement audited (see the rule store's Retire). It is refused while an
// instance of the application was seen in the last minute, unless forced,
// and for the application of the dashboard's own engine.
func (d *Dashboard) retire(w http.ResponseWriter, r *http.Request, c *call) {
	if r.PostForm.Get("confirm") != "yes" {
		d.fail(w, r, c, http.StatusBadRequest, "confirm the retirement of the application: nothing was retired")
		return
	}
	if d.local != nil && c.app == d.local.app {
		d.fail(w, r, c, http.StatusConflict, "this is the application of the dashboard's own engine: it cannot be retired")
		return
	}
	var rs retirer
	if d.local != nil {
		rs, _ = d.local.RuleStore.(retirer)
	} else {
		rs, _ = d.store.(retirer)
	}
	if rs == nil {
		d.fail(w, r, c, http.StatusNotImplemented, "this rule store cannot retire an application")
		return
	}
	if r.PostForm.Get("force") != "yes" {
		ids, err := d.liveInstances(r.Context(), c.app)
		if err != nil {
			d.fail(w, r, c, http.StatusBadGateway, "the fleet could not be read, so nothing was retired: "+err.Error())
			return
		}
		if len(ids) > 0 {
			if len(ids) > 10 {
				ids = append(ids[:10], "…")
			}
			d.fail(w, r, c, http.StatusConflict, "nothing was retired: instances of the application reported in the last minute ("+
				strings.Join(ids, ", ")+"); stop them first, or retire it anyway (they keep the rules they run)")
			return
		}
	}
	if err := rs.Retire(r.Context(), c.app, c.user.name); err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, context.Canceled) {
			status = http.StatusServiceUnavailable
		}
		d.fail(w, r, c, status, "the rule store: "+err.Error())
		return
	}
	d.forget(c.app)
	http.Redirect(w, r, "/?retired="+url.QueryEscape(c.app), http.StatusSeeOther)
}

// forget drops what the dashboard cached of app's versions.
func (d *Dashboard) forget(app string) {
	d.ruleCache.mu.Lock()
	delete(d.ruleCache.apps, app)
	d.ruleCache.mu.Unlock()
	pre := app + "\x00"
	d.diffs.mu.Lock()
	for k := range d.diffs.m {
		if strings.HasPrefix(k, pre) {
			delete(d.diffs.m, k)
		}
	}
	for k := range d.diffs.decoded {
		if strings.HasPrefix(k, pre) {
			delete(d.diffs.decoded, k)
		}
	}
	d.diffs.mu.Unlock()
}
