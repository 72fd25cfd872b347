package tidbenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/laneq/laneq/internal/backoff"
)

// containerExpiry is a safety net: the daemon removes a container that a
// crashed test binary never purged after this long.
const containerExpiry = 2 * time.Hour

func splitImage(ref string) (repo, tag string) {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

func startDocker(ctx context.Context, opts Options) (*Server, error) {
	forced := opts.Mode == ModeDocker
	pool, err := dockertest.NewPool("")
	if err == nil {
		err = pool.Client.Ping()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: no Docker daemon answers: %v", ErrUnavailable, err)
	}
	repo, tag := splitImage(opts.Image)
	if _, err := pool.Client.InspectImage(opts.Image); err != nil {
		if !errors.Is(err, dc.ErrNoSuchImage) {
			return nil, fmt.Errorf("tidbenv: inspect image %s: %w", opts.Image, err)
		}
		// In auto mode a missing image is not worth a network round trip on
		// every test binary; LANEQ_TIDB=docker asks for the pull explicitly.
		if !forced {
			return nil, fmt.Errorf("%w: image %s is not present (pull it, run `make tidb-image`, or set %s=docker to pull)",
				ErrUnavailable, opts.Image, EnvMode)
		}
		fmt.Fprintf(opts.Progress, "tidbenv: pulling %s\n", opts.Image)
		if err := pool.Client.PullImage(dc.PullImageOptions{Repository: repo, Tag: tag, Context: ctx}, dc.AuthConfiguration{}); err != nil {
			return nil, fmt.Errorf("tidbenv: image %s is not present and cannot be pulled: %w (on machines without a registry run `make tidb-image`)", opts.Image, err)
		}
	}

	loopback := []dc.PortBinding{{HostIP: "127.0.0.1", HostPort: ""}}
	started := time.Now()
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository:   repo,
		Tag:          tag,
		ExposedPorts: []string{"4000/tcp", "10080/tcp"},
		PortBindings: map[dc.Port][]dc.PortBinding{"4000/tcp": loopback, "10080/tcp": loopback},
		Labels:       map[string]string{"laneq.tidbenv": "1"},
		// As the embedded branch runs it: warnings only (an info line per
		// DDL and connection, through Docker's log driver, costs CPU a
		// test run needs), and the slow log beside the store.
		Cmd: []string{"-L", "warn", "-log-slow-query", "/tmp/tidb-slow.log"},
	}, func(hc *dc.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
		// The unistore data (default path /tmp/tidb) in memory: a test
		// server's data is thrown away with it, and the container's own
		// filesystem (an overlay, fuse-overlayfs on some hosts) is slow.
		hc.Tmpfs = map[string]string{"/tmp": ""}
	})
	if err != nil {
		return nil, fmt.Errorf("tidbenv: run container from %s: %w", opts.Image, err)
	}
	_ = res.Expire(uint(containerExpiry.Seconds()))
	stop := func() error {
		if err := pool.Purge(res); err != nil {
			return fmt.Errorf("tidbenv: remove container %s: %w", res.Container.ID[:12], err)
		}
		return nil
	}
	fmt.Fprintf(opts.Progress, "tidbenv: started container %s from %s\n", res.Container.ID[:12], opts.Image)

	statusAddr := "127.0.0.1:" + res.GetPort("10080/tcp")
	for !statusReady(ctx, statusAddr) {
		if c, err := pool.Client.InspectContainer(res.Container.ID); err == nil && !c.State.Running {
			_ = stop()
			return nil, fmt.Errorf("tidbenv: container from %s exited during start-up (exit code %d)", opts.Image, c.State.ExitCode)
		}
		select {
		case <-ctx.Done():
			_ = stop()
			return nil, fmt.Errorf("tidbenv: container from %s not ready after %s: %w", opts.Image, time.Since(started).Round(time.Second), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	srv := &Server{
		Kind:   KindDocker,
		Detail: opts.Image + " (container " + res.Container.ID[:12] + ")",
		base:   loopbackConfig(res.GetPort("4000/tcp")),
		stop:   stop,
		pause: func() error {
			err := retried(freezeAttempts, freezeBackoff, time.Sleep, func() error { return pool.Client.PauseContainer(res.Container.ID) })
			if err != nil {
				return fmt.Errorf("tidbenv: docker pause %s: %w", res.Container.ID[:12], err)
			}
			return nil
		},
		resume: func() error {
			if err := pool.Client.UnpauseContainer(res.Container.ID); err != nil {
				return fmt.Errorf("tidbenv: docker unpause %s: %w", res.Container.ID[:12], err)
			}
			return nil
		},
	}
	if err := srv.waitSQL(ctx); err != nil {
		_ = stop()
		return nil, fmt.Errorf("tidbenv: container from %s: %w", opts.Image, err)
	}
	fmt.Fprintf(opts.Progress, "tidbenv: %s ready in container in %s\n", srv.Version, time.Since(started).Round(100*time.Millisecond))
	return srv, nil
}

// freezeAttempts bounds the tries of one docker pause. The cgroup freezer
// gives up ("OCI runtime pause failed: unable to freeze") when a task does
// not stop in time, which a loaded machine makes likely (seen once in a CI
// run beside two CPU hogs); runc thaws the container again, so another try
// is safe.
const freezeAttempts = 5

var freezeBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}

// retried runs op until it succeeds, at most attempts times, sleeping
// policy's delay between tries, and returns the last error.
func retried(attempts int, policy backoff.Policy, sleep func(time.Duration), op func() error) error {
	var err error
	for i := 1; i <= attempts; i++ {
		if err = op(); err == nil {
			return nil
		}
		if i < attempts {
			sleep(policy.Next(i))
		}
	}
	return fmt.Errorf("%d attempts: %w", attempts, err)
}
