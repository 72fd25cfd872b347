package workqueue_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// The two-process test re-runs this test binary as helper processes; the
// environment tells TestMain to run a claimer instead of the tests.
const (
	helperEnv      = "LANEQ_WORKQUEUE_HELPER"
	helperDSNEnv   = "LANEQ_WORKQUEUE_HELPER_DSN"
	helperScopeEnv = "LANEQ_WORKQUEUE_HELPER_SCOPE"
	// helperUniqueEnv makes the helper an enqueuer instead: after "go",
	// 16 goroutines each enqueue one item of this unique key and it prints
	// "created ID" or "refused ID" for each.
	helperUniqueEnv = "LANEQ_WORKQUEUE_HELPER_UNIQUE"
)

// runHelperProcess is one claiming process: it waits for "go" on stdin (a
// start barrier), claims and completes until the scope has no live work left,
// and prints every work id it executed, one per line.
func runHelperProcess() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper:", err); return 1 }
	owner := os.Getenv(helperEnv)
	db, err := sql.Open("mysql", os.Getenv(helperDSNEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		return fail(err)
	}
	scopeID := os.Getenv(helperScopeEnv)
	if unique, ok := os.LookupEnv(helperUniqueEnv); ok {
		return enqueueUniqueHelper(qu, owner, scopeID, unique)
	}
	if os.Getenv(helperExitAfterEnqueueEnv) != "" {
		enqueueThenExit(qu, scopeID) // never returns
	}
	c, err := qu.NewClaimer(scopeID, owner, workqueue.ClaimerConfig{})
	if err != nil {
		return fail(err)
	}
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fail(fmt.Errorf("start barrier: %q %v", line, err))
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	req := workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 8}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		got, _, err := c.Claim(ctx, req)
		if err != nil {
			return fail(err)
		}
		for _, cl := range got {
			fmt.Fprintln(out, cl.WorkID)
			if _, err := qu.Complete(ctx, cl.Lease); err != nil {
				return fail(err)
			}
		}
		if len(got) > 0 {
			continue
		}
		var live int
		if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND state <> 'completed'", scopeID).Scan(&live); err != nil {
			return fail(err)
		}
		if live == 0 {
			return 0
		}
		time.Sleep(5 * time.Millisecond) // idle: the other process holds the lane heads
	}
	return fail(fmt.Errorf("scope not drained within the deadline"))
}

// enqueueUniqueHelper is the enqueuing helper of helperUniqueEnv.
func enqueueUniqueHelper(qu *workqueue.Queue, owner, scopeID, unique string) int {
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		fmt.Fprintln(os.Stderr, "helper: start barrier:", line, err)
		return 1
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := false
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s-%d", owner, i)
			res, err := qu.Enqueue(context.Background(), scopeID, []workqueue.Event{{IdempotencyKey: key, Payload: []byte("{}"),
				Work: []workqueue.Work{{WorkType: "deliver", UniqueKey: unique}}}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Fprintln(os.Stderr, "helper: enqueue:", err)
				failed = true
				return
			}
			switch w := res[0].Work[0]; {
			case w.Created:
				fmt.Printf("created %d\n", w.WorkID)
			case w.Refused:
				fmt.Printf("refused %d\n", w.WorkID)
			default:
				fmt.Fprintf(os.Stderr, "helper: neither created nor refused: %+v\n", w)
				failed = true
			}
		}()
	}
	wg.Wait()
	if failed {
		return 1
	}
	return 0
}

// helperProc is one helper process of this test binary and what it
// printed.
type helperProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   strings.Builder
	errb  strings.Builder
}

// runHelpers starts n helper processes (named name-0, name-1, ...) with
// env, releases them at once ("go" on stdin), waits for all of them to
// exit and fails the test when one failed.
func runHelpers(t *testing.T, n int, name string, env ...string) []*helperProc {
	t.Helper()
	procs := make([]*helperProc, n)
	for i := range procs {
		p := &helperProc{cmd: exec.Command(os.Args[0], "-test.run=^$")}
		p.cmd.Env = append(append(os.Environ(), helperEnv+"="+name+"-"+strconv.Itoa(i)), env...)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
		stdin, err := p.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = stdin
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		})
		procs[i] = p
	}
	for _, p := range procs { // release them at once
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		p.stdin.Close()
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.cmd.Wait() }()
	}
	wg.Wait()
	for i, p := range procs {
		if errs[i] != nil {
			t.Fatalf("%s-%d: %v\n%s", name, i, errs[i], p.errb.String())
		}
	}
	return procs
}

// TestTwoProcessesClaimDisjointly runs two OS processes claiming from one
// TiDB scope with shared lanes: every item is executed by exactly one of them.
func TestTwoProcessesClaimDisjointly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	const items = 1000
	scopeID := "two-process"
	if err := f.qu.EnsureScope(f.ctx, scopeID, 1); err != nil {
		t.Fatal(err)
	}
	enqueueWorkload(t, f.ctx, f.qu, scopeID, stressWorkload(items))

	procs := runHelpers(t, 2, "process", helperDSNEnv+"="+f.dsn, helperScopeEnv+"="+scopeID)

	executedBy := map[int64]int{}
	perProcess := make([]int, len(procs))
	for i, p := range procs {
		for _, line := range strings.Fields(p.out.String()) {
			id, err := strconv.ParseInt(line, 10, 64)
			if err != nil {
				t.Fatalf("process %d printed %q", i, line)
			}
			if prev, twice := executedBy[id]; twice {
				t.Fatalf("work %d executed by process %d and process %d", id, prev, i)
			}
			executedBy[id] = i
			perProcess[i]++
		}
	}
	var claims int
	if err := f.db.QueryRow("SELECT COALESCE(SUM(attempt_count), 0) FROM work_item WHERE scope_id = ?", scopeID).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if len(executedBy) != items || claims != items {
		t.Fatalf("executed %d distinct items with %d claims, want %d and %d", len(executedBy), claims, items, items)
	}
	if perProcess[0] == 0 || perProcess[1] == 0 {
		t.Fatalf("one process did all the work (%v): the test did not exercise concurrency", perProcess)
	}
	t.Logf("items per process: %v", perProcess)
}
