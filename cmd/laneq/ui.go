package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
)

// runUI serves the dashboard until SIGINT or SIGTERM.
func runUI(c *cli, args []string) error {
	fs := c.flags()
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (loopback by default; beyond loopback it needs --login-file)")
	loginFile := fs.String("login-file", "", "a file holding one line user:password (12+ characters of password): every request must log in "+
		"with it (HTTP basic auth; put TLS in front of it); required to listen beyond loopback and with --allow-writes")
	allowWrites := fs.Bool("allow-writes", false, "enable the write actions: replay, bulk replay, retry now, skip, pause and resume a class "+
		"(each behind a confirmation page and a CSRF token); needs --login-file; read-only without it")
	fs.BoolVar(allowWrites, "allow-replay", false, "the former name of --allow-writes")
	var allowedHosts listFlag
	fs.Var(&allowedHosts, "allowed-host", "a further `name` (or name:port) browsers reach the dashboard by, such as its DNS name or a proxy's "+
		"(repeatable or comma-separated); against DNS rebinding, a request whose Host is none of these, the --listen address "+
		"or localhost/127.x.x.x/[::1] with its port gets 421")
	if err := c.parse(args); err != nil {
		return err
	}
	if *allowWrites && *loginFile == "" {
		// CSRF tokens and the Host check stop browsers; any process on
		// this host can post to a loopback listener as it likes.
		used := "--allow-writes"
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "allow-replay" {
				used = "--allow-replay"
			}
		})
		return &usageError{used + " needs --login-file FILE (one line user:password, a password of 12 or more characters): " +
			"without a login any local process could replay, skip and pause through the dashboard"}
	}
	ctx, cancel := c.context()
	err := c.open(ctx)
	cancel()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	var login *dashboard.Login
	if *loginFile != "" {
		l, err := dashboard.ReadLogin(*loginFile)
		if err != nil {
			var ce *dashboard.ConfigError
			errors.As(err, &ce)
			return &usageError{fmt.Sprintf("--login-file %s: %s", ce.Value, ce.Reason)}
		}
		login = &l
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return &usageError{fmt.Sprintf("--listen %s: %v", *listen, err)}
	}
	hosts := []string(allowedHosts)
	// A name given to --listen is a name the operator means to browse to;
	// an IP address there needs no entry: the dashboard answers to the
	// address a connection arrived at. The bound port, so that :0 works.
	if host, _, err := net.SplitHostPort(*listen); err == nil && host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			hosts = append(hosts, net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
		}
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() && login == nil {
		ln.Close()
		return &usageError{fmt.Sprintf("--listen %s is beyond loopback: give --login-file, so that only those who log in can read dead letters", *listen)}
	}
	d, err := dashboard.New(c.db, dashboard.Config{AllowWrites: *allowWrites, Timeout: c.timeout, Logger: log, AllowedHosts: hosts, Login: login})
	if err != nil {
		ln.Close()
		var ce *dashboard.ConfigError
		if errors.As(err, &ce) {
			return &usageError{fmt.Sprintf("--allowed-host %s: %s", ce.Value, ce.Reason)}
		}
		return fmt.Errorf("start the dashboard: %w", err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		log.Warn("the dashboard listens beyond loopback: requests must log in; without TLS in front of it the credential crosses the network in the clear"+
			"; browsers must use its IP address, the --listen name or an --allowed-host name", "addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	stop, cancelStop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancelStop()
	go func() {
		<-stop.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	fmt.Fprintf(c.stderr, "laneq ui: serving http://%s/ (%s)\n", ln.Addr(), map[bool]string{true: "writes enabled", false: "read-only"}[*allowWrites])
	err = srv.Serve(ln)
	d.Close() // bulk actions still running stop; what they did stays done
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
