package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/workqueue"
)

// binary is the laneq command, built once from this package's source.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "laneq-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "laneq")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build laneq:", err)
		os.Exit(1)
	}
	code := tidbtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// laneq runs the binary with args; dsn goes in through the environment.
func laneq(t *testing.T, dsn string, args ...string) result {
	t.Helper()
	return laneqWithin(t, 0, dsn, args...)
}

// laneqWithin is laneq for a command that must exit within guard (0: no
// bound), such as a server that should refuse to start: one still running
// then is killed and fails the test.
func laneqWithin(t *testing.T, guard time.Duration, dsn string, args ...string) result {
	t.Helper()
	ctx := context.Background()
	if guard > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, guard)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "LANEQ_TIDB_DSN="+dsn)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("laneq %s still ran after %s (killed)\nstderr:\n%s", strings.Join(args, " "), guard, errOut.String())
	}
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

func (r result) want(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// oneLine: a failure is one line on stderr and nothing on stdout.
func (r result) oneLine(t *testing.T, code int, contains string) {
	t.Helper()
	r.want(t, code)
	if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, contains) {
		t.Fatalf("want one line on stderr containing %q, got stdout %q stderr %q", contains, r.stdout, r.stderr)
	}
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v in JSON output:\n%s", err, r.stdout)
	}
	return v
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	// Unmigrated on purpose: `laneq migrate` is what migrates it.
	_, name := tidbtest.NewEmptyDB(t)
	dsn := tidbtest.Server(t).DSN(name)
	// DDL is serialized server-wide, and the server is shared with other
	// test binaries creating databases: more room than the default 30s.
	first := laneq(t, dsn, "migrate", "--timeout", "5m").want(t, 0)
	if !strings.Contains(first.stdout, "applied") || strings.Contains(first.stdout, "applied 0 ") || !strings.Contains(first.stderr, "applying migrations") {
		t.Fatalf("first migrate: %+v", first)
	}
	again := laneq(t, dsn, "migrate", "--json").want(t, 0)
	if got := decode[map[string]int](t, again); got["applied"] != 0 {
		t.Fatalf("second migrate applied %d", got["applied"])
	}
}

const scope = "tenant-a/pack-1"

// A scope with live work in two classes, three dead letters (one of a
// webhook delivery) and a receipt.
func seed(t *testing.T) (dsn string, dead []int64) {
	t.Helper()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	var events []workqueue.Event
	for i := range 8 {
		class := "default"
		if i%4 == 0 {
			class = "bulk"
		}
		key := fmt.Sprintf("fact-%d", i)
		events = append(events, workqueue.Event{IdempotencyKey: key, RouteID: "crm", RouteVersion: 1, EventKind: "changed",
			SourceKind: "object", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", QueueClass: class}}})
	}
	if _, err := qu.Enqueue(ctx, scope, events); err != nil {
		t.Fatal(err)
	}
	in, err := ingress.New(db, ingress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Accept(ctx, ingress.Delivery{Scope: scope, DeliveryID: "dlv-7", Method: "POST", RouteKey: "/hooks/crm",
		ContentType: "text/plain", EventKind: "changed", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	cl, err := qu.NewClaimer(scope, "cli-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 3})
	if err != nil || len(got) != 3 {
		t.Fatalf("claimed %d: %v", len(got), err)
	}
	for _, c := range got {
		if _, err := qu.Fail(ctx, c, workqueue.Failure{Class: "rejected", Summary: "the\tremote\nsaid no"}, workqueue.ErrPermanent); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, c.WorkID)
	}
	return dsn, dead
}

func TestStatsAndDeadLetters(t *testing.T) {
	t.Parallel()
	dsn, dead := seed(t)
	table := laneq(t, dsn, "stats", "--scope", scope).want(t, 0).stdout
	t.Logf("laneq stats:\n%s", table)
	for _, want := range []string{"CLASS", "OLDEST DUE", "bulk", "default", "(all)", "capped at 1000"} {
		if !strings.Contains(table, want) {
			t.Fatalf("stats table without %q:\n%s", want, table)
		}
	}
	s := decode[stats.Scope](t, laneq(t, dsn, "stats", "--scope", scope, "--exact", "--json").want(t, 0))
	if !s.Exact || s.Total.Due != 5 || s.Total.Dead != 3 || len(s.Classes) != 2 || s.Classes[0].Class != "bulk" || s.Classes[0].Due != 2 {
		t.Fatalf("stats JSON %+v", s)
	}

	page := decode[inspect.DeadLetterPage](t, laneq(t, dsn, "dlq", "list", "--scope", scope, "--json").want(t, 0))
	if len(page.Items) != 3 || page.Next != "" || page.Items[0].Failure.Class != "rejected" {
		t.Fatalf("dlq JSON %+v", page)
	}
	first := laneq(t, dsn, "dlq", "list", "--scope", scope, "--limit", "2").want(t, 0).stdout
	t.Logf("laneq dlq list --limit 2:\n%s", first)
	if !strings.Contains(first, "more: --cursor ") || !strings.Contains(first, "the remote said no") || strings.Count(first, "rejected") != 2 {
		t.Fatalf("first dlq page:\n%s", first)
	}
	all := laneq(t, dsn, "dlq", "list", "--scope", scope, "--limit", "2", "--all").want(t, 0)
	if strings.Count(all.stdout, "rejected") != 3 || strings.Contains(all.stdout, "more:") || !strings.Contains(all.stderr, "dead letters read") {
		t.Fatalf("dlq --all:\nstdout %s\nstderr %s", all.stdout, all.stderr)
	}
	if out := laneq(t, dsn, "dlq", "list", "--scope", scope, "--failure-class", "other").want(t, 0).stdout; strings.Contains(out, "rejected") {
		t.Fatalf("a filter that matches nothing listed:\n%s", out)
	}

	item := decode[struct {
		inspect.Item
		Why inspect.Why
	}](t, laneq(t, dsn, "item", "show", "--work-id", fmt.Sprint(dead[0]), "--json").want(t, 0))
	if item.State != "dead" || item.Failure == nil || len(item.History) != 1 || item.Why.Kind != inspect.WhyFinished {
		t.Fatalf("item JSON %+v", item)
	}
	out := laneq(t, dsn, "item", "show", "--work-id", fmt.Sprint(dead[0])).want(t, 0).stdout
	t.Logf("laneq item show:\n%s", out)
	if !strings.Contains(out, "state") || !strings.Contains(out, "DEPTH") || !strings.Contains(out, "dead at") || !strings.Contains(out, "a replay runs it again") {
		t.Fatalf("item table:\n%s", out)
	}

	laneq(t, dsn, "replay", "--scope", scope, "--work-id", fmt.Sprint(dead[0])).oneLine(t, 4, "pass --yes")
	replayed := laneq(t, dsn, "replay", "--scope", scope, "--work-id", fmt.Sprint(dead[0]), "--yes", "--json").want(t, 0)
	if child := decode[map[string]any](t, replayed); child["child"] == nil || child["state"] != "pending" {
		t.Fatalf("replay JSON %s", replayed.stdout)
	}
	laneq(t, dsn, "replay", "--scope", scope, "--work-id", fmt.Sprint(dead[0]), "--yes").oneLine(t, 4, "replayed")

	rc := decode[ingress.Receipt](t, laneq(t, dsn, "receipt", "show", "--scope", scope, "--delivery", "dlv-7", "--json").want(t, 0))
	if rc.DeliveryID != "dlv-7" || rc.Status != "pending" {
		t.Fatalf("receipt JSON %+v", rc)
	}
	laneq(t, dsn, "receipt", "show", "--scope", scope, "--delivery", "dlv-7 ").oneLine(t, 3, "not found")

	laneq(t, dsn, "scope", "set-generation", "--scope", scope, "--generation", "2").oneLine(t, 4, "pass --yes")
	laneq(t, dsn, "scope", "set-generation", "--scope", scope, "--generation", "2", "--yes").want(t, 0)
	if s := decode[stats.Scope](t, laneq(t, dsn, "stats", "--scope", scope, "--json").want(t, 0)); s.Generation != 2 || s.Total.Live() != 0 {
		t.Fatalf("after set-generation: generation %d, %d live", s.Generation, s.Total.Live())
	}
}

// Bad command lines and an unreachable database: one line, a meaningful
// exit code, nothing on stdout.
func TestErrors(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	laneq(t, dsn, "stats", "--nope").oneLine(t, 2, "flag provided but not defined")
	laneq(t, dsn, "stats").oneLine(t, 2, "missing --scope")
	laneq(t, dsn, "stats", "--scope", "s", "extra").oneLine(t, 2, "unexpected argument")
	laneq(t, dsn, "frobnicate").oneLine(t, 2, "unknown command")
	laneq(t, dsn, "dlq", "list", "--scope", "s", "--since", "yesterday").oneLine(t, 2, "--since")
	laneq(t, dsn, "dlq", "list", "--scope", "s", "--limit", "9999").oneLine(t, 2, "Limit")
	laneq(t, dsn, "stats", "--scope", "no-such-scope").oneLine(t, 3, "unknown scope")
	laneq(t, dsn, "item", "show", "--work-id", "12345").oneLine(t, 3, "not found")
	laneq(t, "", "stats", "--scope", "s").oneLine(t, 2, "LANEQ_TIDB_DSN")
	laneq(t, "root@tcp(127.0.0.1:1)/laneq", "stats", "--scope", "s").oneLine(t, 1, "cannot reach the database")
	if r := laneq(t, dsn, "stats", "-h").want(t, 0); !strings.Contains(r.stderr, "-exact") {
		t.Fatalf("help: %+v", r)
	}
	if r := laneq(t, dsn).want(t, 2); !strings.Contains(r.stderr, "exit codes") {
		t.Fatalf("no command: %+v", r)
	}
}

// laneq ui serves the dashboard on the address it prints, refuses a
// request for another host with 421, and stops on SIGINT with exit 0; a
// bad listen address or allowed host is a usage error.
func TestUI(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	laneq(t, dsn, "ui", "--listen", "not-an-address").oneLine(t, 2, "--listen")
	laneq(t, dsn, "ui", "--listen", "127.0.0.1:0", "--allowed-host", "ok.example,user@dash.example").oneLine(t, 2, "--allowed-host user@dash.example")
	// Beyond loopback only with a login; a login file must be readable and
	// hold one user:password line with a password of 12 or more.
	laneq(t, dsn, "ui", "--listen", "0.0.0.0:0").oneLine(t, 2, "--listen 0.0.0.0:0 is beyond loopback: give --login-file")
	laneq(t, dsn, "ui", "--listen", "127.0.0.1:0", "--login-file", filepath.Join(t.TempDir(), "missing")).oneLine(t, 2, "--login-file")
	short := filepath.Join(t.TempDir(), "login")
	if err := os.WriteFile(short, []byte("ops:short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	laneq(t, dsn, "ui", "--listen", "0.0.0.0:0", "--login-file", short).oneLine(t, 2, "at least 12 characters")
	ui := startUI(t, dsn, "--listen", "127.0.0.1:0")
	if !strings.Contains(ui.banner, "(read-only)") {
		t.Fatalf("laneq ui without --allow-writes: %q", ui.banner)
	}
	res, err := http.Get(ui.addr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "Scopes") {
		t.Fatalf("GET /: %d\n%s", res.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", ui.addr, nil)
	req.Host = "attacker.example:" + req.URL.Port() // a DNS-rebinding page's
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("GET / for another host: %d, want 421", res.StatusCode)
	}
	if err := ui.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := ui.cmd.Wait(); err != nil {
		t.Fatalf("laneq ui after SIGINT: %v", err)
	}
}

// uiProcess is a running laneq ui.
type uiProcess struct {
	cmd    *exec.Cmd
	banner string // its "serving" line
	addr   string // http://host:port/
}

// startUI starts laneq ui with args and waits for the line that says where
// it serves; the test's end kills it if it still runs.
func startUI(t *testing.T, dsn string, args ...string) *uiProcess {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"ui"}, args...)...)
	cmd.Env = append(os.Environ(), "LANEQ_TIDB_DSN="+dsn)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ui := &uiProcess{cmd: cmd}
	lines := bufio.NewScanner(stderr)
	var said []string
	for ui.addr == "" && lines.Scan() {
		said = append(said, lines.Text())
		if m := regexp.MustCompile(`serving (http://\S+/) \(`).FindStringSubmatch(lines.Text()); m != nil {
			ui.banner, ui.addr = lines.Text(), m[1]
		}
	}
	if ui.addr == "" {
		t.Fatalf("laneq ui never said where it serves; it said:\n%s", strings.Join(said, "\n"))
	}
	go func() { // keep the pipe drained
		for lines.Scan() {
		}
	}()
	return ui
}

// get requests path, with the login of TestUIWritesNeedLogin when
// withLogin, and returns the status.
func (ui *uiProcess) get(t *testing.T, path string, withLogin bool) int {
	t.Helper()
	req, err := http.NewRequest("GET", strings.TrimSuffix(ui.addr, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if withLogin {
		req.SetBasicAuth("ops", "correct horse battery")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// laneq bench runs its workers as this binary re-executed, on the DSN's
// server, and exits 0 with a verified report; bad settings are usage
// errors before any TiDB is touched.
func TestBench(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	laneq(t, dsn, "bench", "--lease", "3s", "--freeze", "1s").oneLine(t, 2, "freeze")
	laneq(t, dsn, "bench", "--tidb", "nowhere").oneLine(t, 2, "--tidb")
	laneq(t, dsn, "bench", "--processes", "65").oneLine(t, 2, "processes")
	r := laneq(t, dsn, "bench", "--json", "--items", "80", "--processes", "2", "--executors", "2",
		"--lease", "1s", "--handler-latency", "100ms", "--enqueue-rate", "30", "--enqueue-batch", "5",
		"--kills", "1", "--freezes", "0", "--tidb-pauses", "0", "--drops", "1", "--fault-every", "1s").want(t, 0)
	rep := decode[struct {
		Laneq struct {
			Items        int
			Completed    int
			Faults       []struct{ Kind string }
			Verification struct{ OK bool }
		}
	}](t, r)
	if !rep.Laneq.Verification.OK || rep.Laneq.Completed != rep.Laneq.Items || len(rep.Laneq.Faults) != 2 {
		t.Fatalf("report: %+v\nstderr:\n%s", rep.Laneq, r.stderr)
	}
	if !strings.Contains(r.stderr, "laneq:") {
		t.Fatalf("no progress lines on stderr: %q", r.stderr)
	}
}
