package laneq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// dsn is a migrated database of the shared test TiDB, for the examples.
var dsn string

func TestMain(m *testing.M) {
	os.Exit(tidbtest.MainWithDB(m, func(d string) { dsn = d }))
}

type SendEmail struct{ To string }

func (SendEmail) Kind() string { return "send_email" }

func ExampleClient() {
	ctx := context.Background()
	client, err := laneq.Open(ctx, dsn, laneq.Config{Scope: "tenant-a", Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	laneq.AddWorker(client, func(ctx context.Context, job *laneq.Job[SendEmail]) error {
		fmt.Println("sending to", job.Args.To)
		return nil
	})
	done, _ := client.Subscribe(laneq.EventCompleted)
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, SendEmail{To: "ada@example.com"}); err != nil {
		log.Fatal(err)
	}
	fmt.Println((<-done).Kind)
	// Output:
	// sending to ada@example.com
	// completed
}

type SyncAccount struct{ Step string }

func (SyncAccount) Kind() string { return "sync_account" }

// Cancelling a running item: its handler's context ends at the worker's
// next heartbeat. A lane runs one item at a time whatever the handler
// does: the follower in the item's lane starts only once the cancelled
// handler has returned, even though this one finishes its step first.
func ExampleClient_Cancel() {
	ctx := context.Background()
	client, err := laneq.Open(ctx, dsn, laneq.Config{Scope: "tenant-cancel", Migrate: true,
		Queue: workqueue.Config{Lease: 3 * time.Second}}) // a heartbeat every second
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	running, slowReturned := make(chan struct{}), make(chan struct{})
	laneq.AddWorker(client, func(ctx context.Context, job *laneq.Job[SyncAccount]) error {
		if job.Args.Step == "next" {
			select {
			case <-slowReturned:
				return nil
			default:
				return errors.New("started beside the slow step")
			}
		}
		close(running)
		<-ctx.Done()
		fmt.Println("slow step told to stop:", errors.Is(context.Cause(ctx), workqueue.ErrCancelRequested))
		time.Sleep(100 * time.Millisecond) // finishing what it was writing
		close(slowReturned)
		return ctx.Err()
	})
	events, _ := client.Subscribe(laneq.EventCancelled, laneq.EventCompleted, laneq.EventRetried)
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	slow, err := client.Enqueue(ctx, SyncAccount{Step: "slow"}, laneq.WithSourceLane("account:7"))
	if err != nil {
		log.Fatal(err)
	}
	next, err := client.Enqueue(ctx, SyncAccount{Step: "next"}, laneq.WithSourceLane("account:7"))
	if err != nil {
		log.Fatal(err)
	}
	<-running
	out, err := client.Cancel(ctx, slow.WorkID, "customer closed the account")
	if err != nil {
		log.Fatal(err)
	}
	ended := map[int64]laneq.EventKind{}
	for len(ended) < 2 {
		e := <-events
		ended[e.WorkID] = e.Kind
	}
	fmt.Println("was running:", out.Running)
	fmt.Println("slow step:", ended[slow.WorkID])
	fmt.Println("next step:", ended[next.WorkID])
	// Output:
	// slow step told to stop: true
	// was running: true
	// slow step: cancelled
	// next step: completed
}
