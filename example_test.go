package laneq_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
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
