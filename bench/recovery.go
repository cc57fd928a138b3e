package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// workerProc is a `jetloop worker` process of the recovery measurement.
type workerProc struct {
	id, addr string
	cmd      *exec.Cmd
	done     chan struct{}
	wg       sync.WaitGroup
}

func (e *env) startWorkerProc(ctx context.Context, id, addr string) (*workerProc, error) {
	logf, err := os.OpenFile(filepath.Join(e.dir, id+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	ttl := e.cfg.LeaseTTL.String()
	cmd := exec.Command(e.cfg.Executable, "worker", "--server", e.srv.ClientURL(), "--id", id, "--http", addr)
	cmd.Env = append(os.Environ(), "JETLOOP_LEASE_TTL="+ttl, "JETLOOP_ACK_WAIT="+ttl,
		"JETLOOP_WORK_DIR="+filepath.Join(e.dir, "work"), "JETLOOP_LOG_LEVEL=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", e.cfg.Executable, err)
	}
	p := &workerProc{id: id, addr: addr, cmd: cmd, done: make(chan struct{})}
	p.wg.Go(func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("worker %s exited before it was ready (see %s)", id, filepath.Join(e.dir, id+".log"))
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("worker %s not ready within a minute", id)
		}
	}
}

// kill kills the process with SIGKILL and waits for it.
func (p *workerProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wg.Wait()
}

// benchRecovery runs two `jetloop worker` processes, and Recoveries times
// kills -9 the one running a session's tool step (a shell sleeping 3 s,
// which is not safe to replay) and measures the time until the session is
// done on the other: the lease's lapse and the message's redelivery, the
// recovery's synthetic result for the interrupted call, and the model
// step after it. The killed worker is started again between rounds.
func benchRecovery(ctx context.Context, e *env) (map[string]float64, error) {
	if e.cfg.Executable == "" {
		return nil, fmt.Errorf("%w: no jetloop executable to run workers of", errSkipped)
	}
	def := policies.Definition{Name: "recover", Tools: []string{"shell"}, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{Text: "working", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "sleep 3"}}}},
		{Text: "done"},
	}}}
	store, err := policies.NewStore(ctx, e.js, e.names)
	if err != nil {
		return nil, err
	}
	if _, err := store.Put(ctx, def); err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	procs := map[string]*workerProc{}
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	for i, addr := range addrs {
		id := fmt.Sprintf("bench-worker-%d", i+1)
		p, err := e.startWorkerProc(ctx, id, addr)
		if err != nil {
			return nil, err
		}
		procs[id] = p
	}
	watch, err := e.watchStatus()
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	var times []time.Duration
	for i := range e.cfg.Recoveries {
		ref, _ := streams.NewSessionRef("recover", fmt.Sprintf("s%d", i))
		if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: "go"}); err != nil {
			return nil, err
		}
		owner, err := awaitToolIntent(ctx, e, ref)
		if err != nil {
			return nil, err
		}
		p, ok := procs[owner]
		if !ok {
			return nil, fmt.Errorf("%s is run by %q, which is no worker of this measurement", ref, owner)
		}
		t0 := time.Now()
		p.kill()
		end, err := watch.until(ctx, ref, record.StatusDone, 5*time.Minute)
		if err != nil {
			return nil, err
		}
		times = append(times, end.Sub(t0))
		delete(procs, owner)
		again, err := e.startWorkerProc(ctx, owner, p.addr)
		if err != nil {
			return nil, err
		}
		procs[owner] = again
	}
	worst := 0.0
	for _, d := range times {
		worst = max(worst, float64(d.Nanoseconds())/1e6)
	}
	return map[string]float64{
		"recovery-p50-ms": percentile(times, 0.5),
		"recovery-max-ms": worst,
		"lease-ttl-ms":    float64(e.cfg.LeaseTTL.Milliseconds()),
	}, nil
}

// awaitToolIntent waits until ref has a tool step in flight and returns
// the worker that owns it.
func awaitToolIntent(ctx context.Context, e *env, ref streams.SessionRef) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		tr, err := record.Show(ctx, e.js, e.names, ref)
		if err == nil && tr.Pending != nil && tr.Pending.Kind == record.StepTool {
			return tr.Pending.Owner, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("%s has no tool step in flight within a minute", ref)
}

// freeAddrs finds n free loopback addresses for workers started again on
// the same one after a kill (freePorts: outside the ephemeral range, which
// the workers' reconnects draw from while one is down).
func freeAddrs(n int) ([]string, error) {
	ps, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return out, nil
}
