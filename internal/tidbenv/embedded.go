package tidbenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rootModule is the module line that marks the top of a laneq checkout.
const rootModule = "module github.com/laneq/laneq"

// FindServerBinary resolves the embedded tidb-server: the explicit path if
// given, else bin/tidb-server at the top of the laneq checkout containing the
// working directory (where `make tidb` puts it), else tidb-server on PATH.
func FindServerBinary(explicit string) (string, error) {
	if explicit != "" {
		if err := checkExecutable(explicit); err != nil {
			return "", fmt.Errorf("tidbenv: %s=%s: %w", EnvServerBinary, explicit, err)
		}
		return explicit, nil
	}
	var looked []string
	if root, ok := checkoutRoot(); ok {
		p := filepath.Join(root, "bin", "tidb-server")
		if checkExecutable(p) == nil {
			return p, nil
		}
		looked = append(looked, p)
	}
	if p, err := exec.LookPath("tidb-server"); err == nil {
		return p, nil
	}
	looked = append(looked, "tidb-server on $PATH")
	return "", fmt.Errorf("%w: embedded tidb-server not found (looked at %s); run `make tidb` or set %s",
		ErrUnavailable, strings.Join(looked, ", "), EnvServerBinary)
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// checkoutRoot walks up from the working directory to laneq's go.mod.
func checkoutRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(bytes.TrimSpace(b), []byte(rootModule+"\n")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// freePort asks the kernel for an unused loopback port. Another process can
// take it before tidb-server binds it; startEmbedded retries on that.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("tidbenv: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ErrPortInUse reports that a requested port is already bound.
var ErrPortInUse = errors.New("port already in use")

func checkPortFree(port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("tidbenv: 127.0.0.1:%d: %w (%v)", port, ErrPortInUse, err)
	}
	return l.Close()
}

func startEmbedded(ctx context.Context, opts Options) (*Server, error) {
	bin, err := FindServerBinary(opts.ServerBinary)
	if err != nil {
		return nil, err
	}
	pinned := opts.Port != 0 || opts.StatusPort != 0
	attempts := 3
	if pinned {
		attempts = 1
	}
	var lastErr error
	for i := 0; i < attempts; i++ {
		srv, err := startEmbeddedOnce(ctx, bin, opts)
		if err == nil {
			return srv, nil
		}
		lastErr = err
		// Only a lost race for an auto-picked port is worth another try.
		if pinned || !errors.Is(err, ErrPortInUse) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startEmbeddedOnce(ctx context.Context, bin string, opts Options) (*Server, error) {
	port, statusPort := opts.Port, opts.StatusPort
	for _, p := range []*int{&port, &statusPort} {
		if *p == 0 {
			free, err := freePort()
			if err != nil {
				return nil, err
			}
			*p = free
		} else if err := checkPortFree(*p); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "laneq-tidb-")
	if err != nil {
		return nil, fmt.Errorf("tidbenv: create data directory: %w", err)
	}
	logPath := filepath.Join(dir, "tidb.log")
	cmd := exec.Command(bin,
		"-store=unistore",
		"-path", filepath.Join(dir, "data"),
		"-host", "127.0.0.1",
		"-P", strconv.Itoa(port),
		"-status", strconv.Itoa(statusPort),
		"-socket", "",
		"-log-file", logPath,
		// Otherwise the slow-query log lands in the working directory (a
		// test's package directory).
		"-log-slow-query", filepath.Join(dir, "tidb-slow.log"),
		"-L", "warn",
	)
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("tidbenv: create log file: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	setChildAttrs(cmd)
	started := time.Now()
	if err := cmd.Start(); err != nil {
		out.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("tidbenv: start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); out.Close() }()

	stop := func() error {
		defer os.RemoveAll(dir)
		select {
		case <-exited:
			return nil
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return nil
	}
	fmt.Fprintf(opts.Progress, "tidbenv: starting embedded %s on 127.0.0.1:%d (status %d)\n", bin, port, statusPort)

	statusAddr := "127.0.0.1:" + strconv.Itoa(statusPort)
	for !statusReady(ctx, statusAddr) {
		select {
		case werr := <-exited:
			exited <- werr // let stop observe the exit too
			msg := tailLogs(logPath, filepath.Join(dir, "stdout.log"))
			_ = stop()
			if strings.Contains(msg, "address already in use") {
				return nil, fmt.Errorf("tidbenv: embedded tidb-server exited: %w (port %d or %d): %s", ErrPortInUse, port, statusPort, msg)
			}
			return nil, fmt.Errorf("tidbenv: embedded tidb-server exited during start-up (%v): %s", werr, msg)
		case <-ctx.Done():
			msg := tailLogs(logPath, filepath.Join(dir, "stdout.log"))
			_ = stop()
			return nil, fmt.Errorf("tidbenv: embedded tidb-server not ready after %s: %w: %s", time.Since(started).Round(time.Second), ctx.Err(), msg)
		case <-time.After(100 * time.Millisecond):
		}
	}
	srv := &Server{
		Kind:   KindEmbedded,
		Detail: bin,
		base:   loopbackConfig(strconv.Itoa(port)),
		stop:   stop,
		pause: func() error {
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				return fmt.Errorf("tidbenv: pause embedded tidb-server (SIGSTOP): %w", err)
			}
			return nil
		},
		resume: func() error {
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				return fmt.Errorf("tidbenv: resume embedded tidb-server (SIGCONT): %w", err)
			}
			return nil
		},
	}
	if err := srv.waitSQL(ctx); err != nil {
		_ = stop()
		return nil, fmt.Errorf("tidbenv: embedded tidb-server on port %d: %w", port, err)
	}
	fmt.Fprintf(opts.Progress, "tidbenv: embedded %s ready in %s\n", srv.Version, time.Since(started).Round(100*time.Millisecond))
	return srv, nil
}

// tailLogs returns the last lines of the server's logs that look like errors,
// or the last lines outright, so a failed start explains itself.
func tailLogs(paths ...string) string {
	var lines []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		f.Close()
	}
	var picked []string
	for _, l := range lines {
		if strings.Contains(l, "[FATAL]") || strings.Contains(l, "[ERROR]") || strings.Contains(l, "panic") ||
			strings.Contains(l, "address already in use") {
			picked = append(picked, l)
		}
	}
	if len(picked) == 0 {
		picked = lines
	}
	if len(picked) > 5 {
		picked = picked[len(picked)-5:]
	}
	if len(picked) == 0 {
		return "(no log output)"
	}
	return strings.Join(picked, "\n")
}
