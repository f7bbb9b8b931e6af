package entry

import "github.com/sluice-go/sluice/internal/core"

// NoteBudget records b, the budget a rate rule leaves after admitting the
// entry, when it is tighter than the one recorded so far (see
// core.Budget): less remaining relative to its limit, then less remaining,
// then a longer reset. Rules call it only when WantBudget is set.
func (c *Context) NoteBudget(b core.Budget) {
	if Tighter(b, c.Budget) {
		c.Budget = b
	}
}

// Tighter reports whether budget a is tighter than b: a zero b (no rule
// yet) is looser than any; otherwise the smaller Remaining/Limit, then the
// smaller Remaining, then the longer Reset.
func Tighter(a, b core.Budget) bool {
	if b.Limit <= 0 {
		return a.Limit > 0
	}
	if a.Limit <= 0 {
		return false
	}
	// a.Remaining/a.Limit < b.Remaining/b.Limit, without dividing.
	l, r := float64(a.Remaining)*b.Limit, float64(b.Remaining)*a.Limit
	if l != r {
		return l < r
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}
