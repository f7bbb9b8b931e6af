package dashboard

import (
	"context"
	"net/http"
	"time"
)

// BucketInfo is the metadata a rule store keeps of one resource named by
// an application's rules in force: who created its rules, in which version
// and when, who last changed them, and which applications' rules name the
// resource.
type BucketInfo struct {
	Resource  string    `json:"resource"`
	Kinds     []string  `json:"kinds"` // the kinds of rule that name it, sorted
	Apps      []string  `json:"apps"`  // every application whose rules name it, sorted
	CreatedBy string    `json:"createdBy"`
	CreatedIn int64     `json:"createdIn"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedBy string    `json:"updatedBy"`
	UpdatedIn int64     `json:"updatedIn"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// BucketStore is implemented by a rule store (Config.Rules) that keeps
// per-resource metadata; the rules page and /api/apps/{app}/buckets show
// it. A store without it (Redis, a folder of files) shows none.
type BucketStore interface {
	// Buckets returns the metadata of the resources app's rules in force
	// name, sorted by resource.
	Buckets(ctx context.Context, app string) ([]BucketInfo, error)
}

// bucketsOf returns the metadata of the resources in listed (all when
// listed is nil), or the store's error as the page shows it; nil, "" when
// the store keeps none.
func (d *Dashboard) bucketsOf(ctx context.Context, app string, listed map[string]bool) ([]BucketInfo, string) {
	bs, ok := d.cfg.Rules.(BucketStore)
	if !ok {
		return nil, ""
	}
	all, err := bs.Buckets(ctx, app)
	if err != nil {
		return nil, "the rule store: " + err.Error()
	}
	if listed == nil {
		return all, ""
	}
	out := []BucketInfo{}
	for _, b := range all {
		if listed[b.Resource] {
			out = append(out, b)
		}
	}
	return out, ""
}

// listedResources is the resources of the rules l lists.
func listedResources(l *ruleList) map[string]bool {
	out := map[string]bool{}
	for _, rows := range l.Rows {
		for _, r := range rows {
			if r.Resource != "" {
				out[r.Resource] = true
			}
		}
	}
	return out
}

// buckets answers /api/apps/{app}/buckets: {"kept": true, "buckets":
// [...]} of every resource app's rules name, or {"kept": false,
// "buckets": []} when the rule store keeps no such metadata (not 404: that
// answers an application the caller may not read).
func (d *Dashboard) buckets(w http.ResponseWriter, r *http.Request, c *call) {
	_, kept := d.cfg.Rules.(BucketStore)
	all, msg := d.bucketsOf(r.Context(), c.app, nil)
	if msg != "" {
		d.fail(w, r, c, http.StatusBadGateway, msg)
		return
	}
	if all == nil {
		all = []BucketInfo{}
	}
	w.Header().Set("Content-Type", "application/json")
	newJSON(w).Encode(struct {
		Kept    bool         `json:"kept"`
		Buckets []BucketInfo `json:"buckets"`
	}{kept, all})
}
