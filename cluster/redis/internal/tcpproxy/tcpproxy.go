// Package tcpproxy is a loopback TCP proxy that tests control, to put a
// slow or silent network between a client and a real server: it forwards
// bytes both ways, delays every read by a set duration, or blackholes
// (accepts connections and reads what arrives, but forwards and answers
// nothing), and closes every connection on demand.
//
// Every goroutine a Proxy starts belongs to it; Close stops them all and
// waits for them.
package tcpproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the connections it accepts on a loopback port to a target
// address. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	delay     atomic.Int64 // ns each read waits before it is forwarded
	blackhole atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every open connection
	closed bool
	quit   chan struct{} // closed by Close: ends delays
	wg     sync.WaitGroup
}

// Start listens on a free loopback port and forwards what it accepts to
// target ("host:port").
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, quit: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients dial, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes every read, in both directions, wait d before its bytes
// are forwarded (a round trip then takes at least 2d); zero forwards at
// once. It applies to reads that complete after the call.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Blackhole, when on, makes the proxy keep accepting connections and
// reading from them but forward and answer nothing: what arrives is
// discarded, in both directions, as a network that drops packets would.
// Turned off, the proxy forwards again (bytes discarded meanwhile are
// lost, so a client must drop the connections whose replies it missed, as
// clients do after a timeout).
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// CloseConns closes every open connection (both ends); the proxy goes on
// accepting new ones.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.quit)
	p.mu.Unlock()
	err := p.ln.Close()
	p.CloseConns()
	p.wg.Wait()
	return err
}

// track records c as open; it reports false (and closes c) once the proxy
// is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client connection c and pumps both ways until
// either side ends. A connection accepted while blackholed is still
// forwarded once the blackhole ends; a target that cannot be reached
// closes it.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	p.wg.Add(2)
	go p.pump(up, c, done)
	go p.pump(c, up, done)
	<-done // one side ended: end the other
	_ = c.Close()
	_ = up.Close()
	<-done
}

// pump copies from src to dst, read by read, applying the delay and the
// blackhole.
func (p *Proxy) pump(dst, src net.Conn, done chan<- struct{}) {
	defer p.wg.Done()
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-p.quit:
					t.Stop()
					return
				}
			}
			if !p.blackhole.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF or a closed connection
		}
	}
}
