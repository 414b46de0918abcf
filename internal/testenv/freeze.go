package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// FreezeProxy forwards TCP to a real server until Freeze, after which it
// keeps every connection open, accepts new ones and forwards nothing, in
// either direction: a server behind a network partition, which neither
// answers nor refuses. Its connections close at the test's end.
type FreezeProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// NewFreezeProxy starts a proxy to target (host:port) on a free loopback
// port.
func NewFreezeProxy(tb testing.TB, target string) *FreezeProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("freeze proxy: listen: %v", err)
	}
	p := &FreezeProxy{ln: ln, target: target}
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *FreezeProxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops every byte from now on.
func (p *FreezeProxy) Freeze() { p.frozen.Store(true) }

// Close ends the proxy and every connection through it.
func (p *FreezeProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *FreezeProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *FreezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
