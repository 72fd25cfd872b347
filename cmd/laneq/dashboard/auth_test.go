package dashboard_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
)

// TestLogin: with a Login configured, every request without it, or with a
// wrong one, gets 401 and a basic-auth challenge before any handler runs
// (a replay POST writes nothing), and the right one is served.
func TestLogin(t *testing.T) {
	t.Parallel()
	db, dead := seed(t)
	c := newClient(t, db, dashboard.Config{AllowWrites: true, Login: &dashboard.Login{User: "ops", Password: "correct horse battery"}})
	get := func(path, user, password string) (int, http.Header) {
		req, _ := http.NewRequest("GET", c.base+path, nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		code, _, hdr := c.do(req)
		return code, hdr
	}
	for _, path := range []string{"/", "/static/style.css", "/metrics", fmt.Sprintf("/item?id=%d", dead[0])} {
		if code, hdr := get(path, "", ""); code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") {
			t.Fatalf("GET %s without a login: %d %q", path, code, hdr.Get("WWW-Authenticate"))
		}
		if code, _ := get(path, "ops", "correct horse battery!"); code != http.StatusUnauthorized {
			t.Fatalf("GET %s with a wrong password: %d", path, code)
		}
		if code, _ := get(path, "root", "correct horse battery"); code != http.StatusUnauthorized {
			t.Fatalf("GET %s as another user: %d", path, code)
		}
		if code, _ := get(path, "ops", "correct horse battery"); code != http.StatusOK {
			t.Fatalf("GET %s logged in: %d", path, code)
		}
	}
	code, _, _ := c.post("/replay", url.Values{"id": {fmt.Sprint(dead[0])}, "csrf": {"x"}}, nil)
	if code != http.StatusUnauthorized {
		t.Fatalf("POST /replay without a login: %d", code)
	}
	var children int
	if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE replay_of_work_id = ?", dead[0]).Scan(&children); err != nil || children != 0 {
		t.Fatalf("%d replays written (%v)", children, err)
	}
}

func TestReadLogin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	l, err := dashboard.ReadLogin(write("ok", "ops:pass:with:colons\n"))
	if err != nil || l.User != "ops" || l.Password != "pass:with:colons" {
		t.Fatalf("ReadLogin = %+v, %v", l, err)
	}
	for name, content := range map[string]string{
		"two-lines": "ops:a-long-password\nroot:a-long-password\n", "no-user": ":a-long-password\n",
		"no-colon": "ops-a-long-password\n", "short": "ops:short\n", "empty": "",
	} {
		if _, err := dashboard.ReadLogin(write(name, content)); !errors.Is(err, dashboard.ErrInvalidConfig) {
			t.Errorf("%s: %v, want a *ConfigError", name, err)
		}
	}
}
