package dashboard

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluice-go/sluice/cluster"
)

// The top refused callers of a resource (docs/design/dashboard.md, "Top
// refused callers"): the engines count, per second, the refusals of each
// resource's most refused callers (cluster.ResourceSecond.Callers), and
// the resource's detail adds them up over the table's seconds and its
// instances. The store's frames are not trusted: a frame's callers beyond
// maxCallersRead are not read, and a name longer than an entry may carry
// is cut.
const (
	maxCallersShown = 10  // callers in a resource's detail
	maxCallersRead  = 16  // callers read of one resource in one frame
	maxCallerBytes  = 256 // the longest caller an entry may carry (sluice.WithCaller)
)

// callerFigure is one refused caller of a resource over the seconds shown.
type callerFigure struct {
	Caller  string `json:"caller"`
	Refused uint64 `json:"refused"`
	// Cut is set when the stored name was longer than any caller an entry
	// may carry (or not UTF-8): Caller is its first 256 bytes, made valid.
	Cut bool `json:"cut,omitempty"`
}

// refusedCallersOf adds up resource name's refused callers over the frames
// of seconds since..now, then the newest frame of each instance (whole:
// the seconds before hold only the busiest resources) when its second was
// not among them, and returns the most refused (by count, then name).
func refusedCallersOf(frames, latest []cluster.Frame, name string, since, now int64) []callerFigure {
	type at struct {
		inst string
		sec  int64
	}
	seen := map[at]bool{}
	sums := map[string]*callerFigure{}
	add := func(f *cluster.Frame) {
		if f.Second < since || f.Second > now || seen[at{f.Instance, f.Second}] {
			return
		}
		for j := range f.Resources {
			rs := &f.Resources[j]
			if rs.Resource != name {
				continue
			}
			seen[at{f.Instance, f.Second}] = true
			addCallers(sums, rs.Callers)
		}
	}
	for i := range frames {
		add(&frames[i])
	}
	for i := range latest {
		add(&latest[i])
	}
	out := make([]callerFigure, 0, len(sums))
	for _, c := range sums {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b callerFigure) int {
		if c := cmp.Compare(b.Refused, a.Refused); c != 0 {
			return c
		}
		return strings.Compare(a.Caller, b.Caller)
	})
	return out[:min(len(out), maxCallersShown)]
}

// addCallers adds one frame's counts of one resource to sums: at most
// maxCallersRead of them (the largest), names cut to maxCallerBytes.
func addCallers(sums map[string]*callerFigure, callers map[string]uint64) {
	names := make([]string, 0, len(callers))
	for n := range callers {
		names = append(names, n)
	}
	if len(names) > maxCallersRead {
		slices.SortFunc(names, func(a, b string) int {
			if c := cmp.Compare(callers[b], callers[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		names = names[:maxCallersRead]
	}
	for _, n := range names {
		shown, cut := callerName(n)
		c := sums[shown]
		if c == nil {
			c = &callerFigure{Caller: shown, Cut: cut}
			sums[shown] = c
		}
		c.Refused += callers[n]
	}
}

// callerName returns n as shown: whole when an entry may carry it, else
// its first maxCallerBytes bytes made valid UTF-8, and true.
func callerName(n string) (string, bool) {
	if len(n) <= maxCallerBytes && utf8.ValidString(n) {
		return n, false
	}
	n = n[:min(len(n), maxCallerBytes)]
	return strings.ToValidUTF8(n, "\uFFFD"), true
}
