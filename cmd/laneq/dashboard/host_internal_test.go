package dashboard

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/laneq/laneq/internal/tidbtest"
)

// hostAllowed's decisions for the cases an HTTP test cannot reach from a
// loopback listener: the scheme's default port, a listener beyond
// loopback, IPv6 and AllowedHosts entries with and without a port.
func TestHostAllowed(t *testing.T) {
	t.Parallel()
	allowed, err := parseAllowedHosts([]string{"Dash.Example", "proxy.example:8443", "[2001:db8::7]"})
	if err != nil {
		t.Fatal(err)
	}
	loop8080 := netip.MustParseAddrPort("127.0.0.1:8080")
	loop80 := netip.MustParseAddrPort("127.0.0.1:80")
	lan := netip.MustParseAddrPort("10.0.0.5:8080")
	mapped := netip.AddrPortFrom(netip.MustParseAddr("::ffff:10.0.0.5"), 8080) // IPv4 on a dual-stack listener
	v6 := netip.MustParseAddrPort("[2001:db8::5]:8080")
	for _, tc := range []struct {
		host        string
		local       netip.AddrPort
		defaultPort string
		want        bool
	}{
		{"localhost:8080", loop8080, "80", true},
		{"LOCALHOST:8080", loop8080, "80", true},
		{"127.0.0.1:8080", loop8080, "80", true},
		{"127.255.0.3:8080", loop8080, "80", true},
		{"[::1]:8080", loop8080, "80", true},
		{"localhost", loop8080, "80", false}, // no port means 80
		{"localhost:80", loop8080, "80", false},
		{"localhost.:8080", loop8080, "80", false},
		{"attacker.example:8080", loop8080, "80", false},
		{"", loop8080, "80", false},
		{"localhost", loop80, "80", true}, // listening on the default port
		{"[::1]", loop80, "80", true},
		{"127.0.0.1", loop80, "80", true},
		{"localhost:80", loop80, "80", true},
		{"attacker.example", loop80, "80", false},
		{"localhost", loop80, "443", false}, // over TLS a missing port is 443
		{"10.0.0.5:8080", lan, "80", true},  // the address the connection arrived at
		{"10.0.0.6:8080", lan, "80", false},
		{"10.0.0.5:8080", mapped, "80", true},
		{"[::ffff:10.0.0.5]:8080", mapped, "80", false},
		{"[2001:db8::5]:8080", v6, "80", true},
		{"[2001:DB8::5]:8080", v6, "80", true},
		{"[2001:db8::5]:8081", v6, "80", false},
		{"dash.example:8080", lan, "80", true}, // an entry without a port: the listening port,
		{"DASH.example", lan, "80", true},      // or none (a proxy on a default port)
		{"dash.example:9000", lan, "80", false},
		{"dash.example.:8080", lan, "80", false},
		{"proxy.example:8443", lan, "80", true}, // an entry with a port: exactly that
		{"proxy.example:8080", lan, "80", false},
		{"proxy.example", lan, "80", false},
		{"[2001:db8::7]", lan, "80", true},
		{"[2001:db8::7]:8080", lan, "80", true},
		{"dash.example", netip.AddrPort{}, "80", true}, // no local address: only entries
		{"dash.example:8080", netip.AddrPort{}, "80", false},
		{"localhost:8080", netip.AddrPort{}, "80", false},
	} {
		if got := hostAllowed(tc.host, tc.local, tc.defaultPort, allowed); got != tc.want {
			t.Errorf("hostAllowed(%q, %v, %s) = %v, want %v", tc.host, tc.local, tc.defaultPort, got, tc.want)
		}
	}
}

// A malformed AllowedHosts entry is refused at New, not left to never match.
func TestAllowedHostsValidated(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "dash.example:0", "dash.example:99999", "dash.example:", "::1", "[::1%lo]",
		"http://dash.example", "dash.example/", "*.example", "user@dash.example"} {
		_, err := New(nil, Config{AllowedHosts: []string{bad}})
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Value != bad {
			t.Errorf("AllowedHosts %q: %v, want a *ConfigError", bad, err)
		}
	}
}

// Over HTTP, AllowedHosts lets a name through (and only it), and the check
// applies with no handler-specific help: a request outside an http.Server
// (no local address) answers only to the listed names.
func TestAllowedHostsOverHTTP(t *testing.T) {
	t.Parallel()
	d, err := New(tidbtest.NewDB(t), Config{AllowedHosts: []string{"dash.example", "proxy.example:8443"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	for host, want := range map[string]int{
		"dash.example:" + port:     200,
		"DASH.EXAMPLE":             200,
		"dash.example:1":           421,
		"proxy.example:8443":       200,
		"proxy.example:" + port:    421,
		"localhost:" + port:        200,
		"attacker.example:" + port: 421,
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %q: status %d, want %d", host, res.StatusCode, want)
		}
	}
	for host, want := range map[string]int{"dash.example": 200, "localhost:8080": 421} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/static/style.css", nil)
		req.Host = host
		d.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("outside a server, Host %q: status %d, want %d", host, rec.Code, want)
		}
	}
}

// A label value is quoted with backslash, double quote and line feed
// escaped, as Prometheus's text format requires.
func TestMetricsLabelEscaping(t *testing.T) {
	t.Parallel()
	if got, want := label("a\\b\"c\nd <e>"), `"a\\b\"c\nd <e>"`; got != want {
		t.Fatalf("label = %s, want %s", got, want)
	}
}
