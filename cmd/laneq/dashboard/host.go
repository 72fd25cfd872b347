package dashboard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// The Host check is the defence against DNS rebinding. A page served from
// an attacker's name that then re-resolves to 127.0.0.1 is, to the
// browser, same-origin with the dashboard: it can read the confirmation
// page (the session cookie goes along, so the CSRF token it carries is
// valid) and POST the replay, and cross-origin protection lets that POST
// through because its Origin and Host agree. The one thing such a page
// cannot choose is the Host header: it names the attacker's host. So every
// request, static files included, must name a host this dashboard is
// meant to be reached by, and anything else is refused with 421
// Misdirected Request ("not served here") before any handler runs.

// ErrInvalidConfig is what every *ConfigError wraps.
var ErrInvalidConfig = errors.New("dashboard: invalid config")

// ConfigError names the Config field and value New refused, and why.
type ConfigError struct {
	Field  string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("dashboard: invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// hostPort is a parsed Host header or AllowedHosts entry.
type hostPort struct {
	name string     // lower case; an IPv6 literal without its brackets
	ip   netip.Addr // set when name is an IP literal
	port string     // "" when none was given
}

// parseHost parses "name", "name:port", "[v6]" or "[v6]:port" strictly:
// names are letters, digits, '.', '-' and '_' (compared in lower case, a
// trailing dot kept, so "localhost." is not "localhost"); an IPv6 literal
// needs its brackets and may not carry a zone; a port is 1-65535 written
// without leading zeros. Browsers send nothing else for an http URL, so
// whatever fails here is refused rather than guessed at.
func parseHost(s string) (hostPort, bool) {
	s = strings.ToLower(s)
	var h hostPort
	rest := ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return hostPort{}, false
		}
		ip, err := netip.ParseAddr(s[1:end])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return hostPort{}, false
		}
		h.name, h.ip, rest = s[1:end], ip, s[end+1:]
	} else {
		name := s
		if i := strings.IndexByte(s, ':'); i >= 0 {
			name, rest = s[:i], s[i:]
		}
		if !validName(name) {
			return hostPort{}, false
		}
		h.name = name
		if ip, err := netip.ParseAddr(name); err == nil {
			h.ip = ip // an IPv4 literal: the name holds no ':'
		}
	}
	if rest != "" {
		port, ok := strings.CutPrefix(rest, ":")
		if !ok || !validPort(port) {
			return hostPort{}, false
		}
		h.port = port
	}
	return h, true
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == s
}

// parseAllowedHosts checks Config.AllowedHosts: a bad entry is refused at
// start-up rather than silently never matching.
func parseAllowedHosts(list []string) ([]hostPort, error) {
	var out []hostPort
	for _, s := range list {
		h, ok := parseHost(strings.TrimSpace(s))
		if !ok {
			return nil, &ConfigError{Field: "AllowedHosts", Value: s,
				Reason: "want a host name or name:port (an IPv6 address in brackets, no zone; port 1-65535)"}
		}
		out = append(out, h)
	}
	return out, nil
}

// hostAllowed reports whether a request's Host names this dashboard, given
// the address the connection arrived at (local; zero when unknown, and
// then only AllowedHosts entries can match) and the scheme's default port.
//
// Accepted: an AllowedHosts entry (one without a port also matches the
// local port or no port, which is what a browser sends behind a proxy on
// a default port); otherwise, with exactly the local port (absent only
// when the local port is the scheme's default), "localhost", an IPv4
// loopback literal (127.x.x.x), [::1], or the local IP address itself.
func hostAllowed(host string, local netip.AddrPort, defaultPort string, allowed []hostPort) bool {
	h, ok := parseHost(host)
	if !ok {
		return false
	}
	localPort := ""
	if local.IsValid() {
		localPort = strconv.Itoa(int(local.Port()))
	}
	for _, a := range allowed {
		switch {
		case a.name != h.name:
		case a.port != "" && h.port == a.port:
			return true
		case a.port == "" && (h.port == "" || h.port == localPort && localPort != ""):
			return true
		}
	}
	if localPort == "" {
		return false
	}
	port := h.port
	if port == "" {
		port = defaultPort
	}
	if port != localPort {
		return false
	}
	switch {
	case h.name == "localhost":
		return true
	case h.ip.IsValid():
		// Unmapped so that a connection to an IPv4 address on a
		// dual-stack listener still matches its dotted form.
		return h.ip.Is4() && h.ip.IsLoopback() || h.ip == netip.IPv6Loopback() || h.ip == local.Addr().WithZone("").Unmap()
	}
	return false
}

// localAddr is the address the request's connection arrived at: the
// address the server is bound to, or, on a wildcard listener, the one
// interface address the client dialled. Zero outside an http.Server.
func localAddr(r *http.Request) netip.AddrPort {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// checkHost refuses, with 421, a request whose Host does not name this
// dashboard; it reports whether the request may go on.
func (s *Server) checkHost(w http.ResponseWriter, r *http.Request) bool {
	defaultPort := "80"
	if r.TLS != nil {
		defaultPort = "443"
	}
	if hostAllowed(r.Host, localAddr(r), defaultPort, s.hosts) {
		return true
	}
	s.cfg.Logger.Warn("dashboard: refused a request for a host it does not serve (a DNS-rebinding page, or a name missing from --allowed-host)",
		"host", r.Host, "remote", r.RemoteAddr)
	http.Error(w, fmt.Sprintf("misdirected request: this dashboard does not answer to the host %q (name it with --allowed-host)", r.Host),
		http.StatusMisdirectedRequest)
	return false
}
