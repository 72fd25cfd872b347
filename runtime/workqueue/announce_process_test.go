package workqueue_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/internal/wakewire"
	"github.com/laneq/laneq/runtime/workqueue"
)

// helperExitAfterEnqueueEnv makes the helper process enqueue one item
// after "go" and exit at once: no Close of its Queue, no deferred call.
const helperExitAfterEnqueueEnv = "LANEQ_WORKQUEUE_HELPER_EXIT_AFTER_ENQUEUE"

// enqueueThenExit is the helper of helperExitAfterEnqueueEnv: a
// short-lived process (a script, a cron job, the CLI) that commits and
// ends without closing anything.
func enqueueThenExit(qu *workqueue.Queue, scopeID string) {
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		fmt.Fprintln(os.Stderr, "helper: start barrier:", line, err)
		os.Exit(1)
	}
	_, err := qu.Enqueue(context.Background(), scopeID, []workqueue.Event{{IdempotencyKey: "exit-after-enqueue", Payload: []byte("{}"),
		Work: []workqueue.Work{{WorkType: "deliver"}}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: enqueue:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestAnnouncementOutlivesItsProcess: a process that holds only a Queue
// (no worker, no wake hub), enqueues and exits at once without Close has
// sent its wake datagram by then: the commit waited for it
// (AnnounceConfig.DeliveryWait).
func TestAnnouncementOutlivesItsProcess(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ep := workqueue.WakeEndpoint{ID: "listener", Address: conn.LocalAddr().String(), Key: make([]byte, 32)}
	_, _ = rand.Read(ep.Key)
	if err := f.qu.RegisterWakeEndpoint(f.ctx, scope, ep, time.Minute); err != nil {
		t.Fatal(err)
	}
	var woken atomic.Bool
	go func() {
		buf := make([]byte, wakewire.MaxDatagram+1)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if m, err := wakewire.Parse(buf[:n]); err == nil && wakewire.Verify(buf[:n], ep.Key) && m.Endpoint == ep.ID && m.Scope == scope {
				woken.Store(true)
			}
		}
	}()

	// It exits 0 only once its Enqueue returned (runHelpers fails the test
	// otherwise): the item is committed.
	runHelpers(t, 1, "exit-after-enqueue", helperDSNEnv+"="+f.dsn, helperScopeEnv+"="+scope, helperExitAfterEnqueueEnv+"=1")
	waitfor.Until(t, 30*time.Second, func() (bool, error) { return woken.Load(), nil },
		func() string { return "no wake datagram from the process that enqueued and exited" })
}
