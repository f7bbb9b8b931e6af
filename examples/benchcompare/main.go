// Command benchcompare measures sluice's admission paths beside
// sentinel-golang, golang.org/x/time/rate Allow, go.uber.org/ratelimit
// Take and failsafe-go's rate limiter, bulkhead and adaptive limiter in one
// run, and prints medians with their spread and the same-run
// ratios that docs/design/benchmarks.md publishes:
//
//	make bench-compare                # = go run . -count 5 in this folder
//	go run ./examples/benchcompare -count 7 -benchtime 500ms
//
// It runs the functions the package's benchmarks run (see paths.go) in
// interleaved rounds: each round measures every path once, serially and
// with all of GOMAXPROCS in parallel, for -benchtime each, in an order that
// rotates from round to round. A ratio is computed within a
// round (both sides measured seconds apart, under the same neighbours), and
// the table gives its median over the rounds with the smallest and largest.
// The header names the CPU and the load average before and after, since
// figures from a shared host move with what else runs on it.
//
// This is its own module so that the comparison's dependencies never reach
// the sluice module.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// ratio is one published comparison: num's time over den's, same mode,
// or with diff, num's time minus den's in nanoseconds.
type ratio struct {
	label    string
	num, den path
	diff     bool
}

// ratios are the comparisons the table prints, in order: first the goals
// of docs/design/benchmarks.md ("Goals"), then the comparisons with the peers.
var ratios = []ratio{
	{label: "sluice Entry+Exit / x/time/rate Allow (goal <= 1.0x)", num: sluiceOneRule, den: rateAllow},
	{label: "every rule kind / x/time/rate Allow (goal <= 1.8x)", num: sluiceAllKinds, den: rateAllow},
	{label: "blocked Entry / x/time/rate Allow (goal <= 1.0x)", num: sluiceBlocked, den: rateAllow},
	{label: "10,000 resources round-robin / one (goal <= 2x)", num: sluiceManyResources, den: sluiceOneRule},
	{label: "100,000 resources round-robin / one (goal <= 3x)", num: sluiceResources100k, den: sluiceOneRule},
	{label: "10,000 resources Zipf / one (goal <= 2x)", num: sluiceResourcesZipf10k, den: sluiceOneRule},
	{label: "100,000 resources Zipf / one (goal <= 3x)", num: sluiceResourcesZipf100k, den: sluiceOneRule},
	{label: "param, 1,000,000 values scattered, ns added (goal <= +300)", num: sluiceParam1M, den: sluiceParamNone, diff: true},
	{label: "every rule kind / one rule (sluice)", num: sluiceAllKinds, den: sluiceOneRule},
	{label: "sluice Entry+Exit / uber ratelimit Take", num: sluiceOneRule, den: ratelimitTake},
	{label: "sentinel-golang Entry+Exit / sluice Entry+Exit", num: sentinelOneRule, den: sluiceOneRule},
	{label: "adaptive rule over one rule, ns added (goal <= +60)", num: sluiceAdaptive, den: sluiceOneRule, diff: true},
	{label: "failsafe-go adaptive limiter / sluice adaptive rule", num: failsafeAdaptive, den: sluiceAdaptive},
	{label: "Entry+Exit with WithBudget / x/time/rate Allow", num: sluiceBudget, den: rateAllow},
	{label: "WithBudget over one rule, ns added", num: sluiceBudget, den: sluiceOneRule, diff: true},
	{label: "failsafe-go smooth rate limiter / x/time/rate Allow", num: failsafeSmooth, den: rateAllow},
	{label: "uber ratelimit Take / x/time/rate Allow", num: ratelimitTake, den: rateAllow},
	{label: "failsafe-go bulkhead / x/time/rate Allow", num: failsafeBulkhead, den: rateAllow},
	{label: "sluice concurrency rule / x/time/rate Allow", num: sluiceConcurrency, den: rateAllow},
	{label: "sluice concurrency rule / failsafe-go bulkhead", num: sluiceConcurrency, den: failsafeBulkhead},
	{label: "resource read by the Prometheus exporter / x/time/rate Allow", num: sluiceWatched, den: rateAllow},
	{label: "resource read by the Prometheus exporter / unread", num: sluiceWatched, den: sluiceOneRule},
	{label: "blocked Entry, system clock / x/time/rate Allow", num: sluiceBlockedClock, den: rateAllow},
}

func main() {
	benchtime := flag.Duration("benchtime", 300*time.Millisecond, "how long to run each benchmark, at most 2s")
	count := flag.Int("count", 5, "rounds, 1 to 50")
	only := flag.String("paths", "", "measure only the paths whose names match this regular expression (and the ratios between them)")
	fastest := flag.Bool("fastest", false, "after the rounds, measure each ratio again as the ratio of the fastest of many short interleaved chunks (serial; for a busy host)")
	flag.Parse()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchcompare: -paths:", err)
			os.Exit(2)
		}
		paths = slices.DeleteFunc(paths, func(p path) bool { return !re.MatchString(p.name) })
	}
	if *benchtime <= 0 || *benchtime > 2*time.Second || *count < 1 || *count > 50 {
		fmt.Fprintln(os.Stderr, "benchcompare: -benchtime must be in (0, 2s] and -count in [1, 50]")
		os.Exit(2)
	}
	// testing.Benchmark reads the testing package's -test.benchtime flag.
	testing.Init()
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		if err := p.verify(1000); err != nil {
			fmt.Fprintln(os.Stderr, "benchcompare:", err)
			os.Exit(1)
		}
	}

	fmt.Printf("cpu: %s; %s/%s, GOMAXPROCS=%d, %s\n", cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Printf("%d rounds, benchtime %v per benchmark; load average before: %s\n", *count, *benchtime, loadAverage())
	start := time.Now()
	res, err := measure(*count, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
	fmt.Printf("load average after: %s; took %.0fs\n\n", loadAverage(), time.Since(start).Seconds())
	printTables(os.Stdout, res)
	if *fastest {
		measured := map[string]bool{}
		for _, p := range paths {
			measured[p.name] = true
		}
		fmt.Printf("\nload average before: %s\n", loadAverage())
		if err := printFastest(os.Stdout, measured); err != nil {
			fmt.Fprintln(os.Stderr, "benchcompare:", err)
			os.Exit(1)
		}
		fmt.Printf("load average after: %s\n", loadAverage())
	}
}

// results holds, per path and mode, one measurement per round.
type results map[string][]testing.BenchmarkResult

func key(p path, parallel bool) string { return p.name + "/" + mode(parallel) }

// measure runs count rounds, each measuring every path once in each mode,
// printing progress to progress. The rounds are interleaved and their order
// rotates: round r starts r benchmarks further along the list, so no path
// is always measured first, last or right after the same neighbour. A path
// is set up once per measurement, outside the timer.
func measure(count int, progress io.Writer) (results, error) {
	type item struct {
		p        path
		parallel bool
	}
	var items []item
	for _, p := range paths {
		items = append(items, item{p, false}, item{p, true})
	}
	res := results{}
	for round := 0; round < count; round++ {
		fmt.Fprintf(progress, "round %d/%d\n", round+1, count)
		for k := range items {
			it := items[(round+k)%len(items)]
			newOp, done, err := it.p.setup()
			if err != nil {
				return nil, fmt.Errorf("%s: setup: %w", key(it.p, it.parallel), err)
			}
			r := testing.Benchmark(func(b *testing.B) { it.p.runOp(b, newOp, it.parallel) })
			done()
			if r.N == 0 {
				return nil, fmt.Errorf("%s failed", key(it.p, it.parallel))
			}
			res[key(it.p, it.parallel)] = append(res[key(it.p, it.parallel)], r)
		}
	}
	return res, nil
}

func printTables(out io.Writer, res results) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\tmedian ns/op\tmin-max\tB/op\tallocs/op\t")
	for _, p := range paths {
		for _, parallel := range []bool{false, true} {
			rs := res[key(p, parallel)]
			ns := make([]float64, len(rs))
			for i, r := range rs {
				ns[i] = nsPerOp(r)
			}
			last := rs[len(rs)-1]
			m, lo, hi := spread(ns)
			fmt.Fprintf(w, "%s\t%.1f\t%.1f-%.1f\t%d\t%d\t\n", key(p, parallel), m, lo, hi, last.AllocedBytesPerOp(), last.AllocsPerOp())
		}
	}
	_ = w.Flush()

	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "same-run ratio\tserial median\tmin-max\tparallel median\tmin-max\t")
	for _, q := range ratios {
		if res[key(q.num, false)] == nil || res[key(q.den, false)] == nil {
			continue // a path left out with -paths
		}
		fmt.Fprintf(w, "%s\t", q.label)
		for _, parallel := range []bool{false, true} {
			num, den := res[key(q.num, parallel)], res[key(q.den, parallel)]
			xs := make([]float64, len(num))
			for i := range num {
				if q.diff {
					xs[i] = nsPerOp(num[i]) - nsPerOp(den[i])
				} else {
					xs[i] = nsPerOp(num[i]) / nsPerOp(den[i])
				}
			}
			m, lo, hi := spread(xs)
			if q.diff {
				fmt.Fprintf(w, "%+.0f ns\t%+.0f to %+.0f\t", m, lo, hi)
			} else {
				fmt.Fprintf(w, "%.2fx\t%.2f-%.2f\t", m, lo, hi)
			}
		}
		fmt.Fprintln(w)
	}
	_ = w.Flush()
	fmt.Fprintln(out, "\n(a ratio or difference is taken within each round, then its median and range over the rounds;\nmemory per resource: go test -run TestMemoryPerResource -v . in the sluice module)")
}

// spread returns the median (the mean of the middle two for an even count),
// the minimum and the maximum of xs.
func spread(xs []float64) (median, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[0], s[n-1]
}

func mode(parallel bool) string {
	if parallel {
		return "parallel"
	}
	return "serial"
}

// nsPerOp is r's time per operation, unrounded (r.NsPerOp truncates).
func nsPerOp(r testing.BenchmarkResult) float64 {
	return float64(r.T.Nanoseconds()) / float64(r.N)
}

// cpuModel is the CPU's model name as Linux reports it, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAverage is the 1, 5 and 15 minute load averages, or "n/a".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
