package faultdb

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// Proxy is a TCP proxy in front of a database server that can be told to
// blackhole its connections: from then on it forwards nothing either way
// and closes nothing, as a network path does that dies without a reset (a
// peer frozen or unplugged, a NAT entry or a firewall state dropped). The
// client's connections are then half-open: a statement is sent, and no
// reply and no error ever come back; only the client's own deadline ends
// the wait. A Rule's Before callback that calls Blackhole makes it happen
// at an exact statement.
//
// It listens on loopback and dials only the target it was given.
type Proxy struct {
	ln         net.Listener
	target     string
	blackholed atomic.Bool

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // both ends of every forwarded connection
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port) on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultdb: proxy listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// ProxyFor starts a proxy to dsn's server and returns it with dsn pointed
// at it (go-sql-driver/mysql syntax).
func ProxyFor(dsn string) (*Proxy, string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("faultdb: proxy: %w", err)
	}
	p, err := NewProxy(cfg.Addr)
	if err != nil {
		return nil, "", err
	}
	cfg.Addr = p.ln.Addr().String()
	return p, cfg.FormatDSN(), nil
}

// Blackhole stops all forwarding, on the connections open now and on any
// made later, for good: what either side sends is read and dropped.
func (p *Proxy) Blackhole() { p.blackholed.Store(true) }

// Close stops listening and closes every connection (a client blocked on
// a blackholed one gets an error), then waits for the forwarding to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultdb: proxy close: %w", err)
	}
	return nil
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close() // the client sees a refused server, as without the proxy
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.forward(server, client)
		go p.forward(client, server)
	}
}

// track remembers a connection's two ends for Close; false once closed.
func (p *Proxy) track(ends ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range ends {
			c.Close()
		}
		return false
	}
	for _, c := range ends {
		p.conns[c] = struct{}{}
	}
	return true
}

// forward copies src to dst until src ends, dropping what it reads while
// blackholed. An end that closes or fails closes the other, as a TCP proxy
// does, except while blackholed: then not even that reaches the other side
// (Close ends them).
func (p *Proxy) forward(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackholed.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !p.blackholed.Load() {
				dst.Close()
			}
			return
		}
	}
}
