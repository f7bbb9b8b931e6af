package sluicefiber

import (
	"bufio"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// SetBodyStreamWriter streams the response body with sw
// (fasthttp.RequestCtx.SetBodyStreamWriter) and has the request's entry
// held until sw returns. fasthttp runs sw after the handlers have returned,
// outside every middleware; a body stream set otherwise releases the entry
// when the handlers return, while it is still being written.
func SetBodyStreamWriter(c *fiber.Ctx, sw fasthttp.StreamWriter) {
	s := &stream{}
	c.Locals(streamKey{}, s)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		done := false
		defer func() { s.end(done) }()
		sw(w)
		done = true
	})
}

type streamKey struct{}

// stream is the hand-over of an entry from the middleware to the stream
// writer that ends it.
type stream struct {
	mu    sync.Mutex
	p     sluice.Pass
	err   error // recorded on the entry when the stream ends
	held  bool  // p handed over
	ended bool  // the writer returned
}

// end exits the entry handed over, if any, once the writer has returned
// (done false: it panicked).
func (s *stream) end(done bool) {
	s.mu.Lock()
	s.ended = true
	held := s.held
	s.mu.Unlock()
	if !held {
		return
	}
	err := s.err
	if !done {
		err = sluicehttp.ErrHandlerPanic
	}
	if err != nil {
		s.p.SetError(err)
	}
	s.p.Exit()
}

// handOver gives p, and the error to record on it, to the stream writer
// SetBodyStreamWriter set for c, and reports whether it took them: false
// when c has none or it has already returned.
func handOver(c *fiber.Ctx, p sluice.Pass, err error) bool {
	if !c.Response().IsBodyStream() {
		return false
	}
	s, _ := c.Locals(streamKey{}).(*stream)
	if s == nil {
		return false
	}
	c.Locals(streamKey{}, nil) // an outer middleware keeps its own entry
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.p, s.err, s.held = p, err, true
	return true
}
