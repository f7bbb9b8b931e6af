package sluicehttp

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/sluice-go/sluice"
)

// statusWriter records the status of the response written through it. It
// passes Flush, Hijack and ReadFrom on to the writer it wraps, and unwraps
// for http.ResponseController, so streaming, websockets and sendfile keep
// working behind the middleware.
type statusWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
	// The engine and resource of the entry made with this writer: an inner
	// middleware of the same engine and resource does not count the request
	// again (see enteredBy).
	eng  *sluice.Engine
	name string
}

var (
	_ http.Flusher  = (*statusWriter)(nil)
	_ http.Hijacker = (*statusWriter)(nil)
	_ io.ReaderFrom = (*statusWriter)(nil)
)

// code returns the final status sent, 200 when the handler wrote nothing.
func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses other than 101 are informational; the final one follows.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends any buffered data; it does nothing when the wrapped writer
// cannot flush.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection when the wrapped writer allows it, and
// otherwise returns an error matching http.ErrNotSupported. A hijacked
// request is never recorded as an error.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, rw, err
}

// ReadFrom copies src to the response, with the wrapped writer's ReadFrom
// (sendfile) when it has one.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides ReadFrom so io.Copy does not loop back into it.
type writerOnly struct{ io.Writer }
