// Command benchcompare measures sluice's admission paths beside
// golang.org/x/time/rate Allow and go.uber.org/ratelimit Take in one run and
// prints a table: ns/op, allocs/op, and the ratio to x/time/rate Allow on a
// finite limiter in the same mode (serial or parallel).
//
//	go run ./examples/benchcompare
//
// It runs the functions the package's benchmarks run (see paths.go), each
// for -benchtime (500ms by default, at most 1s), so the whole table takes
// about 10 s (at most about 25 s). For
// figures to compare across changes, use the benchmarks with -count and
// benchstat instead:
//
//	go test -run '^$' -bench . -benchmem -count 5 ./examples/benchcompare/
//
// This is its own module so that the comparison's dependencies never reach
// the sluice module.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"text/tabwriter"
	"time"
)

func main() {
	benchtime := flag.Duration("benchtime", 500*time.Millisecond, "how long to run each benchmark, at most 1s")
	flag.Parse()
	if *benchtime <= 0 || *benchtime > time.Second {
		fmt.Fprintln(os.Stderr, "benchcompare: -benchtime must be in (0, 1s]")
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

	start := time.Now()
	type row struct {
		name string
		r    testing.BenchmarkResult
	}
	var rows []row
	ref := map[bool]float64{}
	for _, p := range paths {
		for _, parallel := range []bool{false, true} {
			p, parallel := p, parallel
			r := testing.Benchmark(func(b *testing.B) { p.run(b, parallel) })
			if r.N == 0 {
				fmt.Fprintf(os.Stderr, "benchcompare: %s failed\n", p.name)
				os.Exit(1)
			}
			rows = append(rows, row{name: p.name + "/" + mode(parallel), r: r})
			if p.name == reference.name {
				ref[parallel] = nsPerOp(r)
			}
		}
	}

	fmt.Printf("%s/%s, GOMAXPROCS=%d, %s, benchtime %v\n\n",
		runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.Version(), *benchtime)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\tns/op\tB/op\tallocs/op\tx rate.Allow\t")
	for i, x := range rows {
		parallel := i%2 == 1
		fmt.Fprintf(w, "%s\t%.1f\t%d\t%d\t%.2f\t\n",
			x.name, nsPerOp(x.r), x.r.AllocedBytesPerOp(), x.r.AllocsPerOp(), nsPerOp(x.r)/ref[parallel])
	}
	_ = w.Flush()
	fmt.Printf("\n(ran in %.1fs; x rate.Allow is ns/op over RateAllow's in the same mode)\n", time.Since(start).Seconds())
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
