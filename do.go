package sluice

import (
	"context"
	"errors"
	"strconv"

	"github.com/sluice-go/sluice/internal/core"
)

// errPanicked is the error Do records on the entry of fn that panicked.
var errPanicked = errors.New("sluice: protected code panicked")

// NestedBlockError is the error Do returns when its entry was admitted, fn
// ran, and fn returned a refusal: an error matching ErrBlocked, such as
// that of a Do or Entry on another resource inside fn. It does not match
// ErrBlocked itself, since Do's own entry was not refused, and it has no
// Unwrap; Err is what fn returned, from which errors.As reads the inner
// *BlockError (its rule, its RetryAfter). A refusal at any depth of
// nesting comes back as the NestedBlockError of the innermost Do whose fn
// returned it.
//
// Do records no error on its entry for such a return: circuit breakers and
// error statistics of resource count the call as one that did not fail,
// since the work refused was another resource's, as Sentinel's tracer skips
// a BlockException. To count it, use Entry and Pass.SetError.
type NestedBlockError struct {
	// Resource is the resource of the Do whose fn ran.
	Resource string
	// Err is the error fn returned; errors.Is(Err, ErrBlocked).
	Err error
}

func (e *NestedBlockError) Error() string {
	return "sluice: " + strconv.Quote(e.Resource) + " ran and returned a refusal: " + e.Err.Error()
}

// Do runs fn as one entry into resource: it asks to enter (as Entry does,
// with opts) and, when admitted, calls fn, records its error (SetError) and
// exits. It returns the refusal when the entry is refused (a *BlockError
// matching ErrBlocked, or another Entry error such as ErrClosed), without
// calling fn, and otherwise fn's error; so errors.Is(err, ErrBlocked) means
// fn did not run. When fn returns an error matching ErrBlocked (a nested
// Do's refusal), Do returns it as a *NestedBlockError, which does not match
// ErrBlocked, and records no error for it (see NestedBlockError).
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
	if err != nil && errors.Is(err, core.ErrBlocked) {
		// fn ran: the refusal is another entry's, not this one's, and
		// not this entry's failure.
		p.Exit()
		return &NestedBlockError{Resource: resource, Err: err}
	}
	// p never leaves Do, so it has no copies: the record is written
	// directly, without SetError's hold on its generation.
	p.rec.err = err
	p.Exit()
	return err
}
