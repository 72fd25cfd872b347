package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Login is the one HTTP basic-auth credential the dashboard asks for when
// it has one (Config.Login): every request, pages, static files, /metrics
// and writes alike, must carry it. Browsers ask for it once per session;
// Prometheus sends it from basic_auth in its scrape config.
type Login struct {
	User     string
	Password string
}

// minPasswordLen is the shortest password ReadLogin accepts.
const minPasswordLen = 12

// ReadLogin reads a credential file: one line "user:password" (the password
// may contain ':'), at least 12 characters of password, no other lines.
// Keep the file readable by the dashboard's user only.
func ReadLogin(path string) (Login, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Login{}, &ConfigError{Field: "login file", Value: path, Reason: err.Error()}
	}
	line := strings.TrimRight(string(b), "\r\n")
	user, password, ok := strings.Cut(line, ":")
	switch {
	case strings.ContainsAny(line, "\r\n"):
		return Login{}, &ConfigError{Field: "login file", Value: path, Reason: "must hold one line, user:password"}
	case !ok || user == "":
		return Login{}, &ConfigError{Field: "login file", Value: path, Reason: "its line must be user:password"}
	case len(password) < minPasswordLen:
		return Login{}, &ConfigError{Field: "login file", Value: path, Reason: fmt.Sprintf("the password must be at least %d characters", minPasswordLen)}
	}
	return Login{User: user, Password: password}, nil
}

// checkLogin refuses, with 401 and a basic-auth challenge, a request
// without the configured credential; it reports whether the request may go
// on. Without a configured credential every request may (laneq ui's
// read-only dashboard on loopback). The comparison takes the same time whatever the guess.
func (s *Server) checkLogin(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Login == nil {
		return true
	}
	user, password, ok := r.BasicAuth()
	if ok && sameSecret(user, s.cfg.Login.User)&sameSecret(password, s.cfg.Login.Password) == 1 {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="laneq", charset="UTF-8"`)
	http.Error(w, "laneq: log in (the credential of --login-file)", http.StatusUnauthorized)
	return false
}

// sameSecret is 1 when a equals b, in time that depends on neither (both
// are hashed first, so their lengths do not show either).
func sameSecret(a, b string) int {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:])
}
