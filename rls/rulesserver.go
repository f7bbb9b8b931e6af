package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// runRules is Run with a sluice rule file (o.Rules) in place of a config.
func runRules(ctx context.Context, o ServerOptions) error {
	switch {
	case o.Config != "":
		return errors.New("rls: -config and -rules are exclusive: give one")
	case o.Redis != "":
		return errors.New("rls: -redis is not provided with -rules (each replica decides with its own engine)")
	case o.Service.StopIncrementWhenOverLimit:
		return errors.New("rls: -stop-increment-when-over-limit is not provided with -rules")
	}
	set, err := rules.DecodeFile(o.Rules)
	if err != nil {
		return err
	}
	eng := sluice.New(o.EngineOptions...)
	defer eng.Close()
	svc := NewRulesService(eng, o.Service)
	if err := svc.LoadRules(set); err != nil {
		return err
	}
	svc.metrics.configLoads.Add(1)
	srv, hs, err := newGRPCServer(o, svc)
	if err != nil {
		return err
	}
	return serve(ctx, o, srv, hs, svc.metrics, func(ctx context.Context) { watchRules(ctx, o, svc) })
}

// watchRules reloads the rule file when its content changes (checked every
// ReloadInterval); a file that fails to decode or load is logged and
// counted, and the rules in force stay.
func watchRules(ctx context.Context, o ServerOptions, svc *RulesService) {
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
		if err == nil {
			err = svc.LoadRules(set)
		}
		if err != nil {
			svc.metrics.configErrors.Add(1)
			o.Log.Error("rules refused, the rules in force stay", "err", err)
			continue
		}
		svc.metrics.configLoads.Add(1)
		o.Log.Info("rules loaded", "path", o.Rules, "rules", rulesDescription(&set))
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
