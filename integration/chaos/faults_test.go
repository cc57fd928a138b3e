package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"syscall"
	"time"
)

// faults hits random processes every few seconds: kill -9 and a restart,
// or SIGSTOP and SIGCONT. At most one NATS node is down or stopped at a
// time, and a node gets a few seconds to catch up before the next node's
// fault, so the cluster keeps its quorum: what is tested is the runtime's
// recovery, not JetStream's availability without a majority. Processes
// that exit on their own are restarted, as a supervisor would, and
// counted.
type faults struct {
	s     *system
	every time.Duration
	logf  func(format string, args ...any)

	mu       sync.Mutex
	rng      *rand.Rand
	busy     map[*process]bool
	natsBusy bool
	counts   map[string]int
	wg       sync.WaitGroup
}

func newFaults(s *system, seed int64, every time.Duration, logf func(string, ...any)) *faults {
	return &faults{s: s, every: every, logf: logf, rng: rand.New(rand.NewPCG(uint64(seed), 0xfa17)),
		busy: map[*process]bool{}, counts: map[string]int{}}
}

func (f *faults) dur(lo, hi time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lo + time.Duration(f.rng.Int64N(int64(hi-lo)))
}

// run injects faults until ctx ends, then waits for every process to be
// back: restarted, continued and answering.
func (f *faults) run(ctx context.Context) {
	f.wg.Go(func() { f.supervise(ctx) })
	for {
		select {
		case <-ctx.Done():
			f.wg.Wait()
			return
		case <-time.After(f.dur(f.every/2, f.every*3/2)):
		}
		f.inject(ctx)
	}
}

// inject picks a process that is up and not under a fault, and a fault.
func (f *faults) inject(ctx context.Context) {
	all := f.s.all()
	f.mu.Lock()
	var p *process
	for range 10 {
		c := all[f.rng.IntN(len(all))]
		if f.busy[c] || !c.running() || (c.kind == kindNATS && f.natsBusy) {
			continue
		}
		p = c
		break
	}
	if p == nil {
		f.mu.Unlock()
		return
	}
	kill := f.rng.IntN(2) == 0
	f.busy[p] = true
	if p.kind == kindNATS {
		f.natsBusy = true
	}
	f.mu.Unlock()
	f.wg.Go(func() {
		defer func() {
			f.mu.Lock()
			delete(f.busy, p)
			if p.kind == kindNATS {
				f.natsBusy = false
			}
			f.mu.Unlock()
		}()
		if kill {
			f.count("kill -9 " + p.kind)
			f.logf("fault: kill -9 %s", p.name)
			p.kill9()
			time.Sleep(f.dur(300*time.Millisecond, 2*time.Second))
			if err := p.start(); err != nil {
				f.logf("fault: restart %s: %v", p.name, err)
			}
		} else {
			f.count("SIGSTOP " + p.kind)
			f.logf("fault: SIGSTOP %s", p.name)
			_ = p.signal(syscall.SIGSTOP)
			time.Sleep(f.dur(500*time.Millisecond, 4*time.Second))
			_ = p.signal(syscall.SIGCONT)
		}
		if p.kind == kindNATS {
			// Let the node catch up before another node's fault.
			_ = p.waitUp(context.WithoutCancel(ctx), 30*time.Second)
			time.Sleep(3 * time.Second)
		}
	})
}

// supervise restarts processes that exited without a fault, once a second.
func (f *faults) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		for _, p := range f.s.all() {
			f.mu.Lock()
			busy := f.busy[p]
			f.mu.Unlock()
			if busy || p.running() {
				continue
			}
			f.count("restart after an exit " + p.kind)
			f.logf("supervisor: %s exited by itself; restarting. Its log ends:\n%s", p.name, p.tail(15))
			if err := p.start(); err != nil {
				f.logf("supervisor: restart %s: %v", p.name, err)
			}
		}
	}
}

func (f *faults) count(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[what]++
}

// summary lists the faults by kind.
func (f *faults) summary() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k, n := range f.counts {
		out = append(out, fmt.Sprintf("%-36s %d", k, n))
	}
	sort.Strings(out)
	return out
}
