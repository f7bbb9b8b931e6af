package window

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/stat"
	"github.com/stretchr/testify/require"
)

// nodeModel is the reference for a node's figures: every event kept by
// its 100 ms bucket, and the figures computed from them as the node's
// documentation defines them.
//
// The one figure that is not a plain count is a second's AvgRT in History:
// the RT sum over the second's timed exits, where an exit counts as timed
// unless it is untimed and the second-level window still holds it apart.
// Untimed counts are kept apart in that window only: the untimed count of
// bucket b leaves it when an untimed exit writes a later bucket of b's slot
// (b mod 16), and from then on its exits count as timed with no RT. That is
// the rule of the node before the untimed exits stopped writing Complete
// (Complete and Untimed both, then), so the node then and now agree with
// this model on every timeline whose clock readings never go back.
type nodeModel struct {
	b         map[int64]*modelBucket
	uLast     [secRing]int64 // the newest bucket an untimed exit wrote, by slot (-1: none)
	inFlight  int64
	blockedBy [blockTypes]uint64
	total     [metricCount]uint64 // since the start, by metric
}

type modelBucket struct {
	pass, block, timed, untimed, errs, rt uint64
	minRT                                 uint64 // plus one; 0 for none
	untimedGone                           bool   // its untimed count left the second-level window
	byType                                [blockTypes]uint64
}

func newNodeModel() *nodeModel {
	m := &nodeModel{b: map[int64]*modelBucket{}}
	for i := range m.uLast {
		m.uLast[i] = -1
	}
	return m
}

func (m *nodeModel) at(t int64) *modelBucket {
	ep := t / int64(BucketWidth)
	b := m.b[ep]
	if b == nil {
		b = &modelBucket{}
		m.b[ep] = b
	}
	return b
}

func (m *nodeModel) get(ep int64) modelBucket {
	if b := m.b[ep]; b != nil {
		return *b
	}
	return modelBucket{}
}

func (m *nodeModel) pass(t, batch int64) {
	m.at(t).pass += uint64(batch)
	m.total[Pass] += uint64(batch)
	m.inFlight += batch
}

func (m *nodeModel) blockEv(t, batch int64, by core.BlockType) {
	b := m.at(t)
	b.block += uint64(batch)
	m.total[Block] += uint64(batch)
	b.byType[by] += uint64(batch)
	m.blockedBy[by] += uint64(batch)
}

func (m *nodeModel) exit(t, rt, batch int64, failed, timed bool) {
	b := m.at(t)
	m.inFlight -= batch
	m.total[Complete] += uint64(batch)
	if failed {
		b.errs += uint64(batch)
		m.total[Error] += uint64(batch)
	}
	if !timed {
		b.untimed += uint64(batch)
		ep := t / int64(BucketWidth)
		s := ep & (secRing - 1)
		if old := m.uLast[s]; old >= 0 && old < ep {
			m.b[old].untimedGone = true
		}
		m.uLast[s] = ep
		return
	}
	us := uint64(rt / 1000)
	b.timed += uint64(batch)
	b.rt += us * uint64(batch)
	m.total[RT] += us * uint64(batch)
	if b.minRT == 0 || us+1 < b.minRT {
		b.minRT = us + 1
	}
}

// window returns the buckets of the one-second window ending at now.
func (m *nodeModel) window(now int64) []modelBucket {
	ep := now / int64(BucketWidth)
	var out []modelBucket
	for e := ep - SecondBuckets + 1; e <= ep; e++ {
		out = append(out, m.get(e))
	}
	return out
}

func (b modelBucket) metric(x Metric) uint64 {
	switch x {
	case Pass:
		return b.pass
	case Block:
		return b.block
	case Complete:
		return b.timed + b.untimed
	case Error:
		return b.errs
	case RT:
		return b.rt
	case Untimed:
		return b.untimed
	}
	panic(x)
}

func (m *nodeModel) sum(now int64, x Metric) uint64 {
	var s uint64
	for _, b := range m.window(now) {
		s += b.metric(x)
	}
	return s
}

func (m *nodeModel) avgRT(now int64) float64 {
	var rt, timed uint64
	for _, b := range m.window(now) {
		rt, timed = rt+b.rt, timed+b.timed
	}
	if timed == 0 {
		return 0
	}
	return float64(rt) / float64(timed)
}

func (m *nodeModel) minRT(now int64) (int64, bool) {
	best := uint64(0)
	for _, b := range m.window(now) {
		if b.minRT != 0 && (best == 0 || b.minRT < best) {
			best = b.minRT
		}
	}
	return int64(best) - 1, best != 0
}

func (m *nodeModel) maxComplete(now int64) uint64 {
	var best uint64
	for _, b := range m.window(now) {
		best = max(best, b.metric(Complete))
	}
	return best
}

// span sums metric x over the buckets of seconds from..to.
func (m *nodeModel) span(from, to int64, x Metric) uint64 {
	var s uint64
	for e := from * SecondBuckets; e < (to+1)*SecondBuckets; e++ {
		s += m.get(e).metric(x)
	}
	return s
}

func (m *nodeModel) history(now int64, keep int64) []stat.Second {
	last := now/int64(time.Second) - 1
	first := max(last-keep+1, 0)
	var out []stat.Second
	for s := first; s <= last; s++ {
		var b modelBucket
		var apart uint64 // untimed counts the second-level window holds apart
		for e := s * SecondBuckets; e < (s+1)*SecondBuckets; e++ {
			x := m.get(e)
			b.pass, b.block, b.errs, b.rt = b.pass+x.pass, b.block+x.block, b.errs+x.errs, b.rt+x.rt
			b.timed, b.untimed = b.timed+x.timed, b.untimed+x.untimed
			if x.minRT != 0 && (b.minRT == 0 || x.minRT < b.minRT) {
				b.minRT = x.minRT
			}
			if !x.untimedGone {
				apart += x.untimed
			}
		}
		sec := stat.Second{
			Start: s * int64(time.Second), Pass: b.pass, Block: b.block,
			Complete: b.timed + b.untimed, Error: b.errs,
			MeanConcurrency: float64(b.rt) / 1e6,
		}
		if timed := int64(sec.Complete) - int64(apart); timed > 0 {
			sec.AvgRT = time.Duration(float64(b.rt) / float64(timed) * 1000)
		}
		if b.minRT != 0 {
			sec.MinRT = time.Duration(b.minRT-1) * time.Microsecond
		}
		out = append(out, sec)
	}
	return out
}

// TestNodeExitsMatchModel drives a node and its reference model over seeded
// timelines of passes, refusals, timed and untimed exits, with clock steps
// that land on, just before and just after bucket and second boundaries,
// and phases of only timed, only untimed and mixed exits (the longer ones
// leave one kind's counters unwritten for over a minute, as a resource
// whose exits turn timed at its first read does), and compares every
// figure that reads them: the one-second sums, AvgRT, MinRT, the maximum
// completion rate, the minute sums, the totals, the refusals by type,
// History (minute and history windows) and Snapshot.
func TestNodeExitsMatchModel(t *testing.T) { runNodeModel(t, false) }

// runNodeModel is TestNodeExitsMatchModel's body; striped makes the node's
// stripes at a step in the middle of a bucket, and from then on writes each
// pass and exit through a stripe the timeline picks (see
// TestStripedNodeMatchesModel).
//
// complexity: one timeline of seeded events, each kind a case
func runNodeModel(t *testing.T, striped bool) {
	const keep = 90 // seconds of history: the minute window and 26 s beyond
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 24))
			n := new(Node)
			n.InitHistory(keep * time.Second)
			n.armMinute()
			n.armHistory()
			m := newNodeModel()
			now := int64(0)
			phase, phaseEnd := 0, int64(0) // 0 mixed, 1 timed, 2 untimed
			steps := conformance.Steps(6000)
			stripeAt := -1
			if striped {
				stripeAt = rng.IntN(steps / 2)
			}
			var st *stripeSet
			for i := 0; i < steps; i++ {
				if i == stripeAt {
					st = n.stripe()
				}
				var s *stripe
				if st != nil {
					s = &st.stripe[rng.IntN(len(st.stripe))]
				}
				if now >= phaseEnd {
					phase = rng.IntN(3)
					phaseEnd = now + int64(time.Duration(5+rng.IntN(90))*time.Second)
				}
				switch r := rng.IntN(10); {
				case r < 2: // to a bucket boundary, or a nanosecond either side
					next := (now/int64(BucketWidth) + 1) * int64(BucketWidth)
					now = max(now, next+int64(rng.IntN(3))-1)
				case r < 9:
					now += rng.Int64N(int64(120 * time.Millisecond))
				}
				batch := 1 + rng.Int64N(3)
				switch k := rng.IntN(10); {
				case k < 4:
					if s != nil {
						n.passStriped(st, s, now/int64(BucketWidth), uint64(batch), batch)
					} else {
						n.AddPass(now, batch)
					}
					m.pass(now, batch)
				case k < 5:
					by := core.BlockType(rng.IntN(blockTypes))
					n.AddBlock(now, batch, by)
					m.blockEv(now, batch, by)
				default:
					timed := phase == 1 || phase == 0 && rng.IntN(2) == 0
					failed := rng.IntN(4) == 0
					rt := rng.Int64N(int64(50 * time.Millisecond))
					switch ep := now / int64(BucketWidth); {
					case s != nil && timed:
						n.completeStriped(s, ep, rt/1000, batch, failed)
					case s != nil:
						n.untimedStriped(s, ep, uint64(batch), batch, failed)
					case timed:
						n.AddComplete(now, rt, batch, failed)
					default:
						n.AddCompleteUntimed(now, batch, failed)
					}
					m.exit(now, rt, batch, failed, timed)
				}
				if i%53 == 0 {
					compareNodeModel(t, n, m, now, keep, striped)
				}
			}
			compareNodeModel(t, n, m, now, keep, striped)
		})
	}
}

// compareNodeModel compares every figure of n with m's at now. On a striped
// node, History's AvgRT of a second is checked to lie between the RT sum
// over all its exits and over its timed ones: when a second's untimed exits
// leave the second-level window (and stop being told apart from the timed
// ones, see the model) differs there, as their counts reach the window's
// slots at stripe flushes rather than at each exit.
//
// complexity: one comparison per figure, in one place for both tests
func compareNodeModel(t *testing.T, n *Node, m *nodeModel, now, keep int64, striped bool) {
	t.Helper()
	at := fmt.Sprintf("at %v", time.Duration(now))
	for _, x := range []Metric{Pass, Block, Complete, Error, RT, Untimed} {
		require.Equal(t, m.sum(now, x), n.Sum(now, x), "Sum %d %s", x, at)
	}
	ep := now / int64(BucketWidth)
	require.Equal(t, m.get(ep).metric(Complete), n.Bucket(now, Complete), "Bucket %s", at)
	require.Equal(t, m.avgRT(now), n.AvgRT(now), "AvgRT %s", at)
	wantMin, wantOK := m.minRT(now)
	gotMin, gotOK := n.MinRT(now)
	require.Equal(t, wantOK, gotOK, "MinRT %s", at)
	if wantOK {
		require.Equal(t, wantMin, gotMin, "MinRT %s", at)
	}
	require.Equal(t, float64(m.maxComplete(now))*SecondBuckets, n.MaxCompletePerSecond(now), "MaxCompletePerSecond %s", at)
	sec := now / int64(time.Second)
	for _, x := range []Metric{Pass, Block, Complete, Error, RT} {
		require.Equal(t, m.total[x], n.Total(now, x), "Total %d %s", x, at)
		require.Equal(t, m.span(sec-MinuteBuckets+1, sec, x), n.MinuteSum(now, x), "MinuteSum %d %s", x, at)
	}
	for by := range blockTypes {
		require.Equal(t, m.blockedBy[by], n.BlockedBy(core.BlockType(by)), "BlockedBy %d %s", by, at)
		var inSec uint64
		for e := sec * SecondBuckets; e < (sec+1)*SecondBuckets; e++ {
			inSec += m.get(e).byType[by]
		}
		require.Equal(t, inSec, n.BlockedInSecond(sec, core.BlockType(by)), "BlockedInSecond %d %s", by, at)
	}
	want := m.history(now, keep)
	got := n.History(now, time.Duration(keep)*time.Second)
	require.Len(t, got, len(want), at)
	for i := range want {
		g := got[i]
		g.MaxConcurrency = 0 // the node's own tests cover it; the model does not keep it
		if striped {
			w := want[i]
			var timed uint64
			for e := w.Start / int64(BucketWidth); e < (w.Start+int64(time.Second))/int64(BucketWidth); e++ {
				timed += m.get(e).timed
			}
			rt := w.MeanConcurrency * 1e6
			if timed > 0 {
				lo := time.Duration(rt / float64(w.Complete) * 1000)
				hi := time.Duration(rt / float64(timed) * 1000)
				require.True(t, g.AvgRT >= lo-1 && g.AvgRT <= hi+1, "History AvgRT %v not in [%v, %v] %s", g.AvgRT, lo, hi, at)
			}
			g.AvgRT, want[i].AvgRT = 0, 0
		}
		require.Equal(t, want[i], g, "History second %d %s", want[i].Start/int64(time.Second), at)
	}
	s := n.Snapshot(now)
	require.Equal(t, float64(m.sum(now, Complete)), s.CompleteQPS, at)
	require.Equal(t, time.Duration(m.avgRT(now)*1000), s.AvgRT, at)
	require.Equal(t, m.span(sec-MinuteBuckets+1, sec, Complete), s.MinuteComplete, at)
	require.Equal(t, m.total[Complete], s.TotalComplete, at)
	require.Equal(t, time.Duration(m.total[RT])*time.Microsecond, s.TotalRT, at)
	require.Equal(t, m.inFlight, s.Concurrency, at)
	require.Equal(t, m.blockedBy, s.BlockedBy, at)
	if wantOK {
		require.Equal(t, time.Duration(wantMin)*time.Microsecond, s.MinRT, at)
	}
}

// TestNodeCountsExactUnderConcurrency: goroutines refuse and exit (timed
// and untimed) on one node at a clock they share, moving across bucket and
// second boundaries, so the counters by type and the exit counters retire
// while others write; once they are done, the totals by type, the totals
// and the refusals of the last second are exact.
func TestNodeCountsExactUnderConcurrency(t *testing.T) {
	const workers = 4
	steps := conformance.Steps(3000)
	n := new(Node)
	n.InitHistory(time.Minute)
	var clock atomic.Int64
	var want [workers][blockTypes]uint64
	var exits, timed [workers]uint64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range steps {
				now := clock.Add(rng.Int64N(int64(3 * time.Millisecond)))
				batch := 1 + rng.Int64N(3)
				switch k := rng.IntN(3); k {
				case 0:
					by := core.BlockType(rng.IntN(blockTypes))
					n.AddBlock(now, batch, by)
					want[w][by] += uint64(batch)
				case 1:
					n.AddComplete(now, int64(time.Millisecond), batch, false)
					exits[w] += uint64(batch)
					timed[w] += uint64(batch)
				default:
					n.AddCompleteUntimed(now, batch, false)
					exits[w] += uint64(batch)
				}
			}
		}()
	}
	wg.Wait()
	now := clock.Load()
	var total, totalExits, totalTimed uint64
	for by := range blockTypes {
		var s uint64
		for w := range workers {
			s += want[w][by]
		}
		total += s
		require.Equal(t, s, n.BlockedBy(core.BlockType(by)), "type %d", by)
	}
	for w := range workers {
		totalExits += exits[w]
		totalTimed += timed[w]
	}
	require.Equal(t, total, n.Total(now, Block))
	require.Equal(t, totalExits, n.Total(now, Complete))
	require.Equal(t, totalTimed*1000, n.Total(now, RT), "1 ms each timed exit")
}
