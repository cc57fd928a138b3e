package integration

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildJetloop builds cmd/jetloop into a temp folder and returns its path.
func buildJetloop(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "jetloop")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/jetloop")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build jetloop: %v\n%s", err, out)
	}
	return bin
}

// proc is a jetloop process under test.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	ready  chan string // the ready line, once
	lines  chan string // every stdout line after the ready line
	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{}
	err    error
}

// startProc runs bin with args and returns once it started (not ready).
func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, ready: make(chan string, 1), lines: make(chan string, 100), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stderr.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s %v: %v", bin, args, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if first && strings.HasPrefix(line, "jetloop ready") {
				p.ready <- line
				first = false
				continue
			}
			select {
			case p.lines <- line:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady waits for the ready line and returns its key=value fields.
func (p *proc) waitReady(timeout time.Duration) map[string]string {
	p.t.Helper()
	select {
	case line := <-p.ready:
		fields := map[string]string{}
		for _, f := range strings.Fields(strings.TrimPrefix(line, "jetloop ready")) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		return fields
	case <-p.done:
		p.t.Fatalf("process exited before it was ready: %v\nstderr:\n%s", p.err, p.Stderr())
	case <-time.After(timeout):
		p.t.Fatalf("no ready line within %s\nstderr:\n%s", timeout, p.Stderr())
	}
	return nil
}

// signal sends sig and waits for the process to exit, returning its error.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	return p.wait(timeout)
}

// wait waits for the process to exit.
func (p *proc) wait(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.t.Fatalf("process still running %s later\nstderr:\n%s", timeout, p.Stderr())
	}
	return nil
}

// Stderr is what the process wrote to stderr so far.
func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// exitCode is the exit code in err, 0 for nil, -1 when it is not an exit.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// checkLogKeys fails t for every line of a process's text log (stderr)
// that carries a key twice: each layer adds only its own attributes.
func checkLogKeys(t *testing.T, name, stderr string) {
	t.Helper()
	bad := 0
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "time=") {
			continue
		}
		seen := map[string]bool{}
		for _, k := range logKeys(line) {
			if seen[k] && bad < 10 {
				bad++
				t.Errorf("%s logged a line that repeats %s: %s", name, k, line)
			}
			seen[k] = true
		}
	}
}

// logKeys are the keys of one slog text line, in order.
func logKeys(line string) []string {
	var keys []string
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		eq := strings.IndexByte(line[i:], '=')
		if eq < 0 {
			break
		}
		keys = append(keys, line[i:i+eq])
		i += eq + 1
		if i < len(line) && line[i] == '"' {
			// A quoted value, with Go escapes.
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' {
					i++
				}
			}
			i++
			continue
		}
		for i < len(line) && line[i] != ' ' {
			i++
		}
	}
	return keys
}

func TestLogKeys(t *testing.T) {
	line := `time=2026-12-01T13:00:00.000Z level=INFO msg="a \"quoted\" = message" agent=demo err="x=1 y=2" turn=1 turn=2`
	if got := strings.Join(logKeys(line), " "); got != "time level msg agent err turn turn" {
		t.Fatalf("keys %q", got)
	}
}
