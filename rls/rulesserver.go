package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"time"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
)

// runRules is Run with sluice rules (o.Rules: a rule file, or a rule
// store's URL) in place of a config.
func runRules(ctx context.Context, o ServerOptions) error {
	switch {
	case o.Config != "":
		return errors.New("rls: -config and -rules are exclusive: give one")
	case o.Service.StopIncrementWhenOverLimit:
		return errors.New("rls: -stop-increment-when-over-limit is not provided with -rules")
	}
	if o.App == "" {
		o.App = DefaultApp
	}
	eng, rdb, err := rulesEngine(o)
	if err != nil {
		return err
	}
	defer func() {
		eng.Close()
		if rdb != nil {
			rdb.Close()
		}
	}()
	svc := NewRulesService(eng, o.Service)
	load := svc.LoadRules
	var tel cluster.Telemetry
	if rdb != nil {
		load = func(set rules.Set) error { return errShared(svc.LoadRules(shareAll(set))) }
		tel = sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: o.Prefix})
	}
	load = counted(o, svc, load)
	watch := func(ctx context.Context) { watchRules(ctx, o, svc, load) }
	if isStoreURL(o.Rules) {
		leave, err := joinStore(ctx, o, eng, load, tel)
		if err != nil {
			return err
		}
		defer leave()
		watch = func(context.Context) {} // the fleet's member follows the store
	} else {
		set, err := rules.DecodeFile(o.Rules)
		if err == nil {
			err = load(set)
		}
		if err != nil {
			return err
		}
		if tel != nil {
			m, err := fleet.Join(eng, fleet.Config{App: o.App, Telemetry: tel})
			if err != nil {
				return err
			}
			defer m.Close()
		}
	}
	srv, hs, err := newGRPCServer(o, svc)
	if err != nil {
		return err
	}
	return serve(ctx, o, srv, hs, svc.metrics, watch)
}

// counted is load counted in svc's metrics and logged: a refused set
// leaves the rules in force.
func counted(o ServerOptions, svc *RulesService, load func(rules.Set) error) func(rules.Set) error {
	return func(set rules.Set) error {
		if err := load(set); err != nil {
			svc.metrics.configErrors.Add(1)
			o.Log.Error("rules refused, the rules in force stay", "rules", o.rulesSource(), "err", err)
			return err
		}
		svc.metrics.configLoads.Add(1)
		o.Log.Info("rules loaded", "rules", o.rulesSource(), "loaded", rulesDescription(&set))
		return nil
	}
}

// rulesSource names o.Rules for the log, without a password.
func (o *ServerOptions) rulesSource() string {
	if isStoreURL(o.Rules) {
		return redactURL(o.Rules) + " app " + o.App
	}
	return o.Rules
}

// watchRules reloads the rule file with load when its content changes
// (checked every ReloadInterval); a file that fails to decode or load is
// logged and counted, and the rules in force stay.
func watchRules(ctx context.Context, o ServerOptions, svc *RulesService, load func(rules.Set) error) {
	every := o.ReloadInterval
	if every == 0 {
		every = time.Second
	}
	last := fileDigest(o.Rules)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d := fileDigest(o.Rules)
		if d == last {
			continue
		}
		last = d
		set, err := rules.DecodeFile(o.Rules)
		if err != nil {
			svc.metrics.configErrors.Add(1)
			o.Log.Error("rules refused, the rules in force stay", "rules", o.Rules, "err", err)
			continue
		}
		_ = load(set) // counted and logged
	}
}

// fileDigest digests a file's content, read up to the rule decoder's
// limit (a larger file is refused by its size anyway).
func fileDigest(path string) string {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return "error: not a regular file" // opening a FIFO would wait
	}
	f, err := os.Open(path)
	if err != nil {
		return "error: " + err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, rules.DefaultMaxBytes+1)); err != nil {
		return "error: " + err.Error()
	}
	return hex.EncodeToString(h.Sum(nil))
}
