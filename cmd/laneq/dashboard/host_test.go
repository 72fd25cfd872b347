package dashboard_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// hostDo sends method path to c's server with the Host header set to host
// (the URL still dials c's address, as a browser does once a rebound name
// resolves to it).
func (c *client) hostDo(method, host, path string, form url.Values, header map[string]string) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = host
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return c.do(req)
}

// rawStatus sends request as written, for Host headers Go's client would
// not send (empty, absent); it returns the status and body.
func rawStatus(t *testing.T, base, request string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func listenPort(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// A page at an attacker's name that re-resolves to the dashboard's address
// (DNS rebinding) is same-origin to the browser: its requests carry the
// session cookie and a token read from the confirmation page, and its
// POST's Origin matches its Host. Only the Host names the attacker, so the
// dashboard refuses every such request, the static files too, with 421,
// and the replay writes nothing.
func TestForgedHostRefused(t *testing.T) {
	t.Parallel()
	db, dead := seed(t)
	c := newClient(t, db, dashboard.Config{AllowWrites: true})
	port := listenPort(t, c.base)
	forged := "attacker.example:" + port
	id := fmt.Sprint(dead[0])

	code, body, _ := c.hostDo("GET", forged, "/", nil, nil)
	wantPage(t, code, body, http.StatusMisdirectedRequest, "attacker.example")
	if strings.Contains(body, "Scopes") {
		t.Fatalf("a forged Host read the scopes:\n%s", body)
	}
	code, body, _ = c.hostDo("GET", forged, "/static/style.css", nil, nil)
	wantPage(t, code, body, http.StatusMisdirectedRequest)
	code, body, hdr := c.hostDo("GET", forged, "/replay?id="+id, nil, nil)
	wantPage(t, code, body, http.StatusMisdirectedRequest)
	if csrfField.MatchString(body) || hdr.Get("Set-Cookie") != "" {
		t.Fatalf("a forged Host got a session or a token:\n%v\n%s", hdr, body)
	}

	// The strongest version of the attack: a session cookie and a token
	// that are valid (got here through the honest address; the page would
	// have read its own from the confirmation page), sent with the forged
	// Host and a same-origin Origin, as a rebound page would send them.
	code, body = c.get("/replay?id=" + id)
	wantPage(t, code, body, 200, `name="csrf"`)
	token := csrfField.FindStringSubmatch(body)
	if token == nil {
		t.Fatalf("no token in the confirmation page:\n%s", body)
	}
	u, _ := url.Parse(c.base)
	cookies := c.http.Jar.Cookies(u) // the client files cookies under the Host, so send them by hand
	if len(cookies) != 1 {
		t.Fatalf("want the session cookie, have %v", cookies)
	}
	code, body, _ = c.hostDo("POST", forged, "/replay", url.Values{"id": {id}, "csrf": {token[1]}}, map[string]string{
		"Cookie": cookies[0].String(), "Origin": "http://" + forged, "Sec-Fetch-Site": "same-origin"})
	wantPage(t, code, body, http.StatusMisdirectedRequest)
	if n := historyLen(t, db, dead[0]); n != 1 {
		t.Fatalf("a forged Host replayed: history %d", n)
	}

	// Host values that are not exactly a name the dashboard serves with its
	// port; every one reaches the dashboard (Go's server lets them
	// through) and gets 421.
	for _, host := range []string{
		"attacker.example",               // no port, and the port is not 80
		"ATTACKER.example:" + port,       // case does not help
		"localhost",                      // a loopback name without the port (not 80)
		"localhost.:" + port,             // a trailing dot is another name
		"localhost:1",                    // another port
		"localhost:0" + port,             // the port written differently
		"localhost:",                     // an empty port
		"localhost:" + port + ":" + port, // two ports
		"127.1:" + port,                  // not an address a browser writes
		"2130706433:" + port,             // nor is this
		"[::ffff:127.0.0.1]:" + port,     // nor this
		"[::1%25lo]:" + port,             // a zone
		"::1:" + port,                    // IPv6 without brackets
		"[::1:" + port,                   // unclosed bracket
		"localhost.attacker.example:" + port,
	} {
		code, body := rawStatus(t, c.base, "GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		if code != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: status %d, want 421:\n%s", host, code, body)
		}
	}
	for name, request := range map[string]string{
		"empty Host":         "GET / HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n",
		"HTTP/1.0 sans Host": "GET / HTTP/1.0\r\n\r\n",
	} {
		if code, body := rawStatus(t, c.base, request); code != http.StatusMisdirectedRequest {
			t.Errorf("%s: status %d, want 421:\n%s", name, code, body)
		}
	}
	if n := historyLen(t, db, dead[0]); n != 1 {
		t.Fatalf("a refused request replayed: history %d", n)
	}
}

// The address the server listens on and the loopback names with its port
// are answered, case-insensitively, and the whole replay works through a
// loopback name other than the one listened on.
func TestLoopbackAndListenHostsAccepted(t *testing.T) {
	t.Parallel()
	db, dead := seed(t)
	c := newClient(t, db, dashboard.Config{AllowWrites: true})
	port := listenPort(t, c.base)
	for _, host := range []string{
		strings.TrimPrefix(c.base, "http://"), // the listen address itself: 127.0.0.1:port
		"localhost:" + port,
		"LocalHost:" + port,
		"127.8.9.10:" + port,
		"[::1]:" + port,
	} {
		code, body, _ := c.hostDo("GET", host, "/", nil, nil)
		wantPage(t, code, body, 200, "Scopes")
		code, body, _ = c.hostDo("GET", host, "/static/style.css", nil, nil)
		wantPage(t, code, body, 200)
	}

	host := "localhost:" + port
	id := fmt.Sprint(dead[0])
	code, body, _ := c.hostDo("GET", host, "/replay?id="+id, nil, nil)
	wantPage(t, code, body, 200, `name="csrf"`)
	token := csrfField.FindStringSubmatch(body)
	if token == nil {
		t.Fatalf("no token in the confirmation page:\n%s", body)
	}
	code, body, hdr := c.hostDo("POST", host, "/replay", url.Values{"id": {id}, "csrf": {token[1]}},
		map[string]string{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"})
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/item?id=") {
		t.Fatalf("replay through %s: %d %s\n%s", host, code, hdr.Get("Location"), body)
	}
	if n := historyLen(t, db, dead[0]); n != 2 {
		t.Fatalf("history %d after one replay, want 2", n)
	}
}
