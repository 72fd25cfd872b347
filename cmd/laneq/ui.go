package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
)

// runUI serves the dashboard until SIGINT or SIGTERM.
func runUI(c *cli, args []string) error {
	fs := c.flags()
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (loopback by default: the dashboard has no login)")
	allowReplay := fs.Bool("allow-replay", false, "enable the replay button (confirmation page, CSRF token); read-only without it")
	if err := c.parse(args); err != nil {
		return err
	}
	ctx, cancel := c.context()
	err := c.open(ctx)
	cancel()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	d, err := dashboard.New(c.db, dashboard.Config{AllowReplay: *allowReplay, Timeout: c.timeout, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return &usageError{fmt.Sprintf("--listen %s: %v", *listen, err)}
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		log.Warn("the dashboard listens beyond loopback and has no login: anyone who reaches it can read dead letters"+
			map[bool]string{true: " and replay them", false: ""}[*allowReplay], "addr", ln.Addr().String())
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
	fmt.Fprintf(c.stderr, "laneq ui: serving http://%s/ (%s)\n", ln.Addr(), map[bool]string{true: "replay enabled", false: "read-only"}[*allowReplay])
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
