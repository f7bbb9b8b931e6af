// Command quota shows calendar quotas: an API plan's "3 calls a month,
// reset on the 1st at 00:00 UTC", and "2 exports a day per user" on New
// York's calendar, across the 25-hour day when the clocks go back:
//
//	go run ./examples/quota
//
// A refusal's RetryAfter is the time to the reset, and batches (WithBatch)
// cost several units. The engine reads a manual clock
// (sluicetest.NewManualClock) that the program sets to the instants it
// shows, so every run prints the same; a service leaves sluice.WithClock
// out and runs on the system's clock. The counts here live in the process
// and are lost with it: a cluster section (docs/cluster-limits.md) keeps
// them in Redis.
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"
	_ "time/tzdata" // the zone database, whatever the host has

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err := eng.LoadRules(rules.Set{
		Flow: []rules.Flow{{Resource: "api", Threshold: 3, Quota: &rules.Quota{Period: "month"}}},
		Param: []rules.Param{{Resource: "export", Threshold: 2,
			Quota: &rules.Quota{Period: "day", Zone: "America/New_York"}}},
	})
	if err != nil {
		return err
	}
	// A manual clock's reading is the Unix time, for a quota.
	at := func(s string) string {
		t, _ := time.Parse(time.RFC3339, s)
		clk.Set(t.UnixNano())
		return t.UTC().Format("2006-01-02 15:04:05Z")
	}
	call := func(res string, opts ...sluice.EntryOption) string {
		p, err := eng.Entry(res, opts...)
		var be *sluice.BlockError
		switch {
		case err == nil:
			p.Exit()
			return "passed"
		case errors.As(err, &be):
			return fmt.Sprintf("refused, retry after %v (%s)", be.RetryAfter, be.Reason)
		}
		return err.Error()
	}

	fmt.Fprintln(w, "3 calls a month (UTC):")
	when := at("2026-01-30T10:00:00Z")
	fmt.Fprintln(w, " ", when, "a batch of 2:", call("api", sluice.WithBatch(2)))
	when = at("2026-01-31T23:59:58Z")
	fmt.Fprintln(w, " ", when, "1 call:     ", call("api"))
	when = at("2026-01-31T23:59:59Z")
	fmt.Fprintln(w, " ", when, "1 call:     ", call("api"))
	when = at("2026-02-01T00:00:00Z")
	fmt.Fprintln(w, " ", when, "1 call:     ", call("api"))

	fmt.Fprintln(w, "2 exports a day per user (New York, 2026-11-01 has 25 hours):")
	user := func(u string) sluice.EntryOption { return sluice.WithStringArg(0, u) }
	when = at("2026-11-01T04:30:00Z") // 00:30 EDT
	fmt.Fprintln(w, " ", when, "ann:", call("export", user("ann")), "/", call("export", user("ann")))
	fmt.Fprintln(w, " ", when, "ann:", call("export", user("ann")))
	fmt.Fprintln(w, " ", when, "bob:", call("export", user("bob")))
	when = at("2026-11-02T04:59:59Z") // 23:59:59 EST, still the 1st
	fmt.Fprintln(w, " ", when, "ann:", call("export", user("ann")))
	when = at("2026-11-02T05:00:00Z") // midnight EST: the 2nd
	fmt.Fprintln(w, " ", when, "ann:", call("export", user("ann")))
	return nil
}
