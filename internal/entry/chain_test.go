package entry

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/slots"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Slots of each kind, and one of all three. Each has a name so that
// snapshots can be compared by name.
type (
	prepareSlot struct{ name string }
	checkSlot   struct{ name string }
	statSlot    struct{ name string }
	allSlot     struct{ name string }
	notASlot    struct{ name string }
)

func (s *prepareSlot) Prepare(*slots.Entry)                    {}
func (s *checkSlot) Check(*slots.Entry) *core.BlockError       { return nil }
func (s *statSlot) OnPass(*slots.Entry)                        {}
func (s *statSlot) OnBlock(*slots.Entry, *core.BlockError)     {}
func (s *statSlot) OnExit(*slots.Entry, int64, error)          {}
func (s *allSlot) Prepare(*slots.Entry)                        {}
func (s *allSlot) Check(*slots.Entry) *core.BlockError         { return nil }
func (s *allSlot) OnPass(*slots.Entry)                         {}
func (s *allSlot) OnBlock(*slots.Entry, *core.BlockError)      {}
func (s *allSlot) OnExit(*slots.Entry, int64, error)           {}
func (s *notASlot) Release(int64)                              {} // a Ticket, not a slot
func (s *notASlot) Check(*slots.Entry) error                   { return nil }
func (s *notASlot) OnPass(*slots.Entry, *slots.Entry)          {}
func (s *notASlot) Prepare(*slots.Entry, int)                  {}
func (s *notASlot) OnExit(*slots.Entry, int64, error, float64) {}

var (
	_ slots.Preparer = (*prepareSlot)(nil)
	_ slots.Checker  = (*checkSlot)(nil)
	_ slots.Observer = (*statSlot)(nil)
	_ slots.Preparer = (*allSlot)(nil)
	_ slots.Checker  = (*allSlot)(nil)
	_ slots.Observer = (*allSlot)(nil)
)

// slotName returns the name of one of the test slots.
func slotName(s any) string {
	switch s := s.(type) {
	case *prepareSlot:
		return s.name
	case *checkSlot:
		return s.name
	case *statSlot:
		return s.name
	case *allSlot:
		return s.name
	}
	return fmt.Sprintf("%T", s)
}

func names[S any](slots []S) []string {
	if slots == nil {
		return nil
	}
	out := make([]string, len(slots))
	for i, s := range slots {
		out[i] = slotName(s)
	}
	return out
}

func TestChainAddRejectsNonSlots(t *testing.T) {
	tests := []struct {
		name string
		give any
	}{
		{name: "nil", give: nil},
		{name: "int", give: 42},
		{name: "string", give: "flow"},
		{name: "empty struct", give: struct{}{}},
		{name: "near miss signatures", give: &notASlot{name: "x"}},
		{name: "slot by value, methods on pointer", give: allSlot{name: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Chain
			assert.False(t, c.Add(tt.give, 0), "Add(%T)", tt.give)
			assert.Nil(t, c.Snapshot(), "a refused Add publishes nothing")

			require.True(t, c.Add(&checkSlot{name: "ok"}, 0))
			assert.False(t, c.Add(tt.give, -1))
			assert.Equal(t, []string{"ok"}, names(c.Snapshot().Check), "a refused Add leaves the chain as it was")
		})
	}
}

func TestChainSnapshotNilWhenEmpty(t *testing.T) {
	var c Chain
	assert.Nil(t, c.Snapshot())
	assert.Nil(t, (&Chain{}).Snapshot())
}

func TestChainOrder(t *testing.T) {
	type add struct {
		slot  any
		order int
	}
	tests := []struct {
		name        string
		give        []add
		wantPrepare []string
		wantCheck   []string
		wantStat    []string
	}{
		{
			name:      "one check slot",
			give:      []add{{&checkSlot{"c"}, 0}},
			wantCheck: []string{"c"},
		},
		{
			name: "lower order first",
			give: []add{
				{&allSlot{"a5"}, 5},
				{&allSlot{"a1"}, 1},
				{&allSlot{"a-3"}, -3},
				{&allSlot{"a2"}, 2},
			},
			wantPrepare: []string{"a-3", "a1", "a2", "a5"},
			wantCheck:   []string{"a-3", "a1", "a2", "a5"},
			wantStat:    []string{"a-3", "a1", "a2", "a5"},
		},
		{
			name: "equal orders keep registration order",
			give: []add{
				{&allSlot{"first"}, 1},
				{&allSlot{"second"}, 1},
				{&allSlot{"zero"}, 0},
				{&allSlot{"third"}, 1},
			},
			wantPrepare: []string{"zero", "first", "second", "third"},
			wantCheck:   []string{"zero", "first", "second", "third"},
			wantStat:    []string{"zero", "first", "second", "third"},
		},
		{
			name: "each slot listed under the kinds it implements",
			give: []add{
				{&statSlot{"s"}, 2},
				{&prepareSlot{"p"}, 3},
				{&allSlot{"all"}, 1},
				{&checkSlot{"c"}, 0},
				{&checkSlot{"c2"}, 2},
			},
			wantPrepare: []string{"all", "p"},
			wantCheck:   []string{"c", "all", "c2"},
			wantStat:    []string{"all", "s"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Chain
			for _, a := range tt.give {
				require.True(t, c.Add(a.slot, a.order), "Add(%s, %d)", slotName(a.slot), a.order)
			}
			snap := c.Snapshot()
			require.NotNil(t, snap)
			assert.Equal(t, tt.wantPrepare, names(snap.Prepare), "Prepare")
			assert.Equal(t, tt.wantCheck, names(snap.Check), "Check")
			assert.Equal(t, tt.wantStat, names(snap.Stat), "Stat")
		})
	}
}

func TestChainSnapshotIsImmutable(t *testing.T) {
	var c Chain
	require.True(t, c.Add(&allSlot{"a"}, 2))
	before := c.Snapshot()
	require.True(t, c.Add(&allSlot{"b"}, 1))
	after := c.Snapshot()

	assert.Equal(t, []string{"a"}, names(before.Check), "an earlier snapshot does not change")
	assert.Equal(t, []string{"b", "a"}, names(after.Check))
	assert.NotSame(t, before, after)
}

// TestChainConcurrent adds slots from several goroutines while others read
// snapshots, under -race. Every snapshot a reader sees is sorted by order,
// keeps each writer's registration order within an order, and is never
// smaller than the one it saw before; the last holds every slot.
func TestChainConcurrent(t *testing.T) {
	const (
		writers = 4
		perW    = 50
		readers = 2
		orders  = 3
	)
	type tag struct{ writer, i int }
	tagOf := map[string]tag{}
	orderOf := map[string]int{}
	slots := make([][]*allSlot, writers)
	for w := range writers {
		for i := range perW {
			s := &allSlot{name: fmt.Sprintf("w%d-%d", w, i)}
			slots[w] = append(slots[w], s)
			tagOf[s.name] = tag{w, i}
			orderOf[s.name] = i % orders
		}
	}

	check := func(snap *Snapshot) error {
		if len(snap.Prepare) != len(snap.Check) || len(snap.Check) != len(snap.Stat) {
			return fmt.Errorf("kinds disagree: %d prepare, %d check, %d stat", len(snap.Prepare), len(snap.Check), len(snap.Stat))
		}
		last := map[int]int{} // writer -> last index seen at the current order
		prevOrder := -1
		for _, s := range snap.Check {
			name := slotName(s)
			o, tg := orderOf[name], tagOf[name]
			if o < prevOrder {
				return fmt.Errorf("%s (order %d) after order %d", name, o, prevOrder)
			}
			if o != prevOrder {
				prevOrder = o
				clear(last)
			}
			if j, ok := last[tg.writer]; ok && j >= tg.i {
				return fmt.Errorf("%s after w%d-%d at the same order", name, tg.writer, j)
			}
			last[tg.writer] = tg.i
		}
		return nil
	}

	var c Chain
	var (
		writersWG, readersWG sync.WaitGroup
		done                 = make(chan struct{})
		errs                 = make(chan error, writers+readers)
	)
	for w := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			for _, s := range slots[w] {
				if !c.Add(s, orderOf[s.name]) {
					errs <- fmt.Errorf("Add(%s) refused", s.name)
					return
				}
			}
		}()
	}
	for range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			seen := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				snap := c.Snapshot()
				if snap == nil {
					if seen > 0 {
						errs <- fmt.Errorf("snapshot went back to nil after %d slots", seen)
						return
					}
					continue
				}
				if len(snap.Check) < seen {
					errs <- fmt.Errorf("snapshot shrank from %d to %d slots", seen, len(snap.Check))
					return
				}
				seen = len(snap.Check)
				if err := check(snap); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	writersWG.Wait()
	close(done)
	readersWG.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	snap := c.Snapshot()
	require.NotNil(t, snap)
	require.Len(t, snap.Check, writers*perW)
	require.NoError(t, check(snap))
}
