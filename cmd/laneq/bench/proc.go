package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one worker process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error // set before exited closes

	mu       sync.Mutex
	expected bool // killed or stopped on purpose
}

// startProcess starts a worker process and waits for its "ready" line.
func (p *phase) startProcess(ctx context.Context, name string) (*proc, error) {
	env, err := p.workerEnv(name)
	if err != nil {
		return nil, err
	}
	pr := &proc{name: name, log: filepath.Join(p.logs, name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(pr.log)
	if err != nil {
		return nil, fmt.Errorf("bench: worker log: %w", err)
	}
	pr.cmd = exec.Command(p.opts.Executable, p.opts.Args...)
	pr.cmd.Env = append(os.Environ(), env)
	pr.cmd.Stderr = logFile
	setWorkerAttrs(pr.cmd)
	stdout, err := pr.cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := pr.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("bench: start worker %s: %w", name, err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			if !said && strings.TrimSpace(sc.Text()) == "ready" {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	go func() {
		pr.err = pr.cmd.Wait()
		logFile.Close()
		pr.mu.Lock()
		expected := pr.expected
		pr.mu.Unlock()
		if !expected {
			p.mu.Lock()
			p.problems = append(p.problems, fmt.Sprintf("worker %s exited on its own (%v): %s", name, pr.err, tail(pr.log)))
			p.mu.Unlock()
		}
		close(pr.exited)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-pr.exited
			return nil, fmt.Errorf("bench: worker %s exited before it was ready (%v): %s", name, pr.err, tail(pr.log))
		}
	case <-time.After(2 * time.Minute):
		pr.kill()
		return nil, fmt.Errorf("bench: worker %s not ready after 2m: %s", name, tail(pr.log))
	case <-ctx.Done():
		pr.kill()
		return nil, ctx.Err()
	}
	p.mu.Lock()
	p.procs = append(p.procs, pr)
	p.mu.Unlock()
	return pr, nil
}

func (pr *proc) signal(sig syscall.Signal) error {
	if err := pr.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("bench: signal %v to worker %s: %w", sig, pr.name, err)
	}
	return nil
}

// kill is kill -9, waited for.
func (pr *proc) kill() {
	pr.mu.Lock()
	pr.expected = true
	pr.mu.Unlock()
	_ = pr.cmd.Process.Kill()
	<-pr.exited
}

// stop is a graceful stop (SIGTERM; SIGCONT in case it is frozen), then
// kill -9 after grace.
func (pr *proc) stop(grace time.Duration) {
	select {
	case <-pr.exited:
		return
	default:
	}
	pr.mu.Lock()
	pr.expected = true
	pr.mu.Unlock()
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	_ = pr.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-pr.exited:
	case <-time.After(grace):
		pr.kill()
	}
}

func (pr *proc) alive() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(empty log)"
	}
	return s
}

var errNoProcess = errors.New("bench: no live worker process to hit")
