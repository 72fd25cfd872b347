package laneq_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

const (
	workerProcessEnv = "LANEQ_TEST_CLIENT_WORKER_DSN"
	// ingressProcessEnv also runs a receipt router (routeGreeting) in the
	// worker process, its backstops an hour: only wakes can route.
	ingressProcessEnv = "LANEQ_TEST_CLIENT_WORKER_INGRESS"
)

// workerProcess is a worker Client in another OS process, quiet, with its
// probes and backstops off: only announcements can start its items. It
// reports each handler start as "ran WORKID UNIXNANO".
type workerProcess struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	mu    sync.Mutex
}

func startWorkerProcess(tb testing.TB, dsn string, env ...string) *workerProcess {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWorkerProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), workerProcessEnv+"="+dsn), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close() // the helper stops its client when stdin ends
		if err := cmd.Wait(); err != nil {
			tb.Errorf("worker process: %v", err)
		}
	})
	p := &workerProcess{cmd: cmd, lines: bufio.NewScanner(stdout)}
	if line := p.next(tb); line != "quiet" {
		tb.Fatalf("worker process said %q, want quiet", line)
	}
	return p
}

// next returns the helper's next line, failing after the guard.
func (p *workerProcess) next(tb testing.TB) string {
	tb.Helper()
	got := make(chan string, 1)
	go func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.lines.Scan() {
			got <- p.lines.Text()
		} else {
			got <- "EOF " + fmt.Sprint(p.lines.Err())
		}
	}()
	select {
	case line := <-got:
		return line
	case <-time.After(guard):
		tb.Fatalf("worker process said nothing for %s", guard)
	}
	return ""
}

// ranAt reads the start of item workID (any item when 0).
func (p *workerProcess) ranAt(tb testing.TB, workID int64) time.Time {
	tb.Helper()
	f := strings.Fields(p.next(tb))
	if len(f) != 3 || f[0] != "ran" || (workID != 0 && f[1] != strconv.FormatInt(workID, 10)) {
		tb.Fatalf("worker process said %q, want ran %d", strings.Join(f, " "), workID)
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return time.Unix(0, ns)
}

// TestHelperWorkerProcess is the worker process of the tests below; it does
// nothing unless one of them started it.
func TestHelperWorkerProcess(t *testing.T) {
	dsn := os.Getenv(workerProcessEnv)
	if dsn == "" {
		return
	}
	ctx := context.Background()
	off := time.Duration(-1)
	cfg := laneq.Config{Scope: "tenant-a", Worker: worker.Config{Controller: controller.Config{
		GenerationProbeEvery: off, QuietProbeEvery: off, ReconcileEvery: off, MaintainEvery: off,
	}}}
	withIngress := os.Getenv(ingressProcessEnv) != ""
	if withIngress {
		cfg.Ingress = &laneq.IngressConfig{Route: routeGreeting, Router: ingress.RouterConfig{Backstop: time.Hour, QuietBackstop: time.Hour}}
	}
	c, err := laneq.Open(ctx, dsn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out sync.Mutex
	if err := laneq.AddWorker(c, func(ctx context.Context, job *laneq.Job[greet]) error {
		at := time.Now().UnixNano()
		out.Lock()
		defer out.Unlock()
		fmt.Printf("ran %d %d\n", job.Item.WorkID, at)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	quiet := func() bool { return c.Worker().Stats().Quiet && (!withIngress || c.Router().Stats().Quiet) }
	waitfor.Until(t, guard, func() (bool, error) { return quiet(), nil },
		func() string { return fmt.Sprintf("not quiet: %+v", c.Worker().Stats()) })
	out.Lock()
	fmt.Println("quiet")
	out.Unlock()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// producerLatencies enqueues n items one at a time through a producer-only
// Client (no workers: it only announces) and returns, for each, the time
// from its commit to its handler's start in the quiet worker process.
func producerLatencies(tb testing.TB, n int) []time.Duration {
	tb.Helper()
	producer, dsn := openClient(tb, laneq.Config{})
	w := startWorkerProcess(tb, dsn)
	// The announcement runs on the enqueueing goroutine right after the
	// commit, before Enqueue returns: its time is the commit's.
	var committed atomic.Int64
	stop := producer.Queue().OnAnnounce(func(workqueue.Announcement) { committed.Store(time.Now().UnixNano()) })
	defer stop()
	ctx := context.Background()
	lat := make([]time.Duration, 0, n)
	for i := range n {
		res, err := producer.Enqueue(ctx, greet{Name: strconv.Itoa(i)})
		if err != nil {
			tb.Fatal(err)
		}
		lat = append(lat, w.ranAt(tb, res.WorkID).Sub(time.Unix(0, committed.Load())))
	}
	return lat
}

// A producer that is only a Client in one process wakes a quiet worker
// Client in another whose probe and backstop are off: every item starts,
// so every one was announced.
func TestClientProducerOnlyWakesWorkers(t *testing.T) {
	t.Parallel()
	lat := producerLatencies(t, 50)
	t.Logf("commit to handler start over %d items: p50 %s, p99 %s (BenchmarkClientProducerOnlyWakesWorkers measures it)",
		len(lat), queuetest.Percentile(lat, 50), queuetest.Percentile(lat, 99))
}

func BenchmarkClientProducerOnlyWakesWorkers(b *testing.B) {
	lat := producerLatencies(b, b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(queuetest.Percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(queuetest.Percentile(lat, 99)), "p99-ms")
	b.ReportMetric(ms(queuetest.Percentile(lat, 100)), "max-ms")
}

// A delivery accepted by a Client in one process is routed by the quiet
// router of a Client in another (backstops an hour, so only the accept's
// wake can route it) and its item runs there.
func TestClientIngressWakesAnotherProcessesRouter(t *testing.T) {
	t.Parallel()
	hooks, dsn := openClient(t, laneq.Config{Ingress: &laneq.IngressConfig{Route: routeGreeting}})
	w := startWorkerProcess(t, dsn, ingressProcessEnv+"=1")
	ctx := context.Background()
	for i := range 5 {
		acc, err := hooks.Inbox().Accept(ctx, greeting(hooks.Scope(), "d-"+strconv.Itoa(i), "n"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		w.ranAt(t, 0)
		r, err := hooks.Inbox().Receipt(ctx, acc.Receipt.ID)
		if err != nil || r.Status != ingress.StatusMaterialized || r.ClaimOwner == "" {
			t.Fatalf("receipt %d after its item ran: %+v, %v", i, r, err)
		}
	}
}
