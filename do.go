package sluice

import (
	"context"
	"errors"
)

// errPanicked is the error Do records on the entry of fn that panicked.
var errPanicked = errors.New("sluice: protected code panicked")

// Do runs fn as one entry into resource: it asks to enter (as Entry does,
// with opts) and, when admitted, calls fn, records its error (SetError) and
// exits. It returns the refusal when the entry is refused (a *BlockError
// matching ErrBlocked, or another Entry error such as ErrClosed), without
// calling fn, and otherwise fn's error.
//
// If fn panics, Do records an error on the entry ("sluice: protected code
// panicked"), so that circuit breakers and error statistics count the panic
// as a failure, exits, and lets the panic go on unchanged: it does not
// recover it. (With `defer p.Exit()` after Entry, a panic exits the entry
// with no error recorded: a success for breakers.)
//
// fn is called on the caller's goroutine; Do adds no allocation to Entry and
// Exit (a closure that does not escape costs none either).
func (eng *Engine) Do(resource string, fn func() error, opts ...EntryOption) error {
	return eng.do(context.Background(), resource, fn, opts)
}

// DoContext is Do with a context that bounds any wait for the entry, as
// EntryContext does. fn is not given the context: it captures the one it
// needs.
func (eng *Engine) DoContext(ctx context.Context, resource string, fn func() error, opts ...EntryOption) error {
	return eng.do(ctx, resource, fn, opts)
}

// Do runs fn as one entry into resource on the default engine (see
// Engine.Do).
func Do(resource string, fn func() error, opts ...EntryOption) error {
	return defaultPtr.Load().do(context.Background(), resource, fn, opts)
}

// DoContext runs fn as one entry into resource on the default engine, with
// a context that bounds any wait (see Engine.DoContext).
func DoContext(ctx context.Context, resource string, fn func() error, opts ...EntryOption) error {
	return defaultPtr.Load().do(ctx, resource, fn, opts)
}

func (eng *Engine) do(ctx context.Context, resource string, fn func() error, opts []EntryOption) error {
	p, err := eng.enter(ctx, resource, opts)
	if err != nil {
		return err
	}
	returned := false
	defer func() {
		if !returned { // fn panicked; the panic goes on after Exit
			p.SetError(errPanicked)
			p.Exit()
		}
	}()
	err = fn()
	returned = true
	// p never leaves Do, so it has no copies: the record is written
	// directly, without SetError's hold on its generation.
	p.rec.err = err
	p.Exit()
	return err
}
