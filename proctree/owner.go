//go:build linux

package proctree

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The process that starts trees, their owner, is a child subreaper too,
// from its first Starter on. A tree whose command kills its reaper leaves
// processes that are reparented to the nearest living subreaper among
// their ancestors: to the owner, not to init. So while the owner runs,
// nothing a tree starts ever leaves the owner's subtree, whatever it does
// to its session, process group, environment or arguments.
//
// A child of the owner is either a process the owner started (a reaper,
// or any other subprocess) or an orphan that was reparented to it. Go's
// os package gets a pidfd of every child it starts in the clone that
// starts it (CLONE_PIDFD) and keeps it until Wait has reaped the child:
// a child this process holds no pidfd of was not started here. Such
// orphans, with everything under them, are killed when a reaper ends
// without a status (killOrphans), and reaped, by pidfd and never with a
// wait for any child, so that no status os/exec waits for is taken
// (reapOrphans, on every SIGCHLD).
var owner struct {
	once sync.Once
	mu   sync.Mutex
	// err says why this process does not take orphans in; nil when it
	// does.
	err error
	// checked is set once a reaper's pidfd was found among this
	// process's: orphans are told from started children that way.
	checked bool
	// scan serialises the scans for orphans.
	scan sync.Mutex
	// fds is held for reading while proctree holds a pidfd of its own
	// (see Proc.signal), and for writing while the pidfds of this process
	// are read, so that a process proctree signals is not taken for one
	// this process started.
	fds sync.RWMutex
}

// becomeOwner makes this process a child subreaper that kills and reaps
// what trees leave behind, once, and says why it is not one.
func becomeOwner() error {
	owner.once.Do(func() {
		err := pidfdsWork()
		if err == nil {
			err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
			if err != nil {
				err = fmt.Errorf("proctree: become a child subreaper: %w", err)
			}
		}
		owner.mu.Lock()
		owner.err = err
		owner.mu.Unlock()
		if err != nil {
			return
		}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, unix.SIGCHLD)
		go func() {
			for range sigs {
				reapOrphans()
			}
		}()
	})
	return ownerErr()
}

func ownerErr() error {
	owner.mu.Lock()
	defer owner.mu.Unlock()
	return owner.err
}

// pidfdsWork checks what telling started children from orphans needs:
// pidfd_open, waitid on a pidfd, pidfd_send_signal (Linux 5.4+, allowed
// by any seccomp filter), as Go's os package checks them before it uses
// pidfds for the children it starts.
func pidfdsWork() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("proctree: pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil); !errors.Is(err, unix.ECHILD) {
		return fmt.Errorf("proctree: waitid on a pidfd: %v", err)
	}
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		return fmt.Errorf("proctree: pidfd_send_signal: %w", err)
	}
	return nil
}

// checkStarted confirms, for the first reaper this process starts, that
// this process holds a pidfd of it, as Go's os package does where pidfds
// work; where they do not, orphans cannot be told from started children,
// and this process stops taking them in rather than kill a child it
// started.
func checkStarted(pid int) {
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if owner.err != nil || owner.checked {
		return
	}
	started, err := startedHere()
	if err == nil && !started[pid] {
		err = fmt.Errorf("proctree: this process holds no pidfd of the reaper %d it started, so orphans cannot be told from its children", pid)
	}
	if err != nil {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		owner.err = err
		return
	}
	owner.checked = true
}

// startedHere lists the processes this process holds a pidfd of: the
// children it started and has not reaped yet (and a process some code
// here opened a pidfd of, which is then left alone too).
func startedHere() (map[int]bool, error) {
	owner.fds.Lock()
	defer owner.fds.Unlock()
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("proctree: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("proctree: list /proc/self/fd: %w", err)
	}
	out := map[int]bool{}
	for _, n := range names {
		// "anon_inode:[pidfd]", or "pidfd:[<inode>]" on pidfs.
		if link, err := os.Readlink("/proc/self/fd/" + n); err != nil || !strings.Contains(link, "pidfd") {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + n)
		if err != nil {
			continue // closed meanwhile: its process was reaped
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
					out[pid] = true
				}
			}
		}
	}
	return out, nil
}

// orphans looks at this process's subtree: its children it did not start
// that still run, with every living process under them (live), and those
// that have exited, to reap (exited). With all false it reads only this
// process's children, where the kernel lists them.
func orphans(all bool) (live, exited []Proc, err error) {
	self := os.Getpid()
	var children map[int][]stat
	if !all {
		children, err = ownChildren(self)
	}
	if all || err != nil {
		if children, err = parentLinks(); err != nil {
			return nil, nil, err
		}
	}
	if len(children[self]) == 0 || !all && !slices.ContainsFunc(children[self], func(c stat) bool { return c.state == 'Z' }) {
		return nil, nil, nil // nothing to kill, or nothing to reap
	}
	// After the walk: a child it started is in the walk and still has its
	// pidfd, or was reaped since, and is then gone.
	started, err := startedHere()
	if err != nil {
		return nil, nil, err
	}
	var queue []int
	for _, c := range children[self] {
		if started[c.pid] {
			continue
		}
		p := Proc{Pid: c.pid, Start: c.start}
		if c.state == 'Z' || c.state == 'X' {
			exited = append(exited, p)
			continue
		}
		live = append(live, p)
		queue = append(queue, c.pid)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			queue = append(queue, c.pid)
			if c.state != 'Z' && c.state != 'X' {
				live = append(live, Proc{Pid: c.pid, Start: c.start})
			}
		}
	}
	return live, exited, nil
}

// parentLinks reads the parent of every process: the children of each.
func parentLinks() (map[int][]stat, error) {
	all, err := pids()
	if err != nil {
		return nil, err
	}
	children := map[int][]stat{}
	for _, pid := range all {
		st, err := readStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		children[st.ppid] = append(children[st.ppid], st)
	}
	return children, nil
}

// ownChildren reads the children of self's threads from
// /proc/self/task/*/children (CONFIG_PROC_CHILDREN): an error where the
// kernel has no such file.
func ownChildren(self int) (map[int][]stat, error) {
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil || len(tasks) == 0 {
		return nil, errors.New("proctree: no children lists")
	}
	var out []stat
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that ended
		}
		for f := range strings.FieldsSeq(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if st, err := readStat(pid); err == nil && st.ppid == self {
				out = append(out, st)
			}
		}
	}
	return map[int][]stat{self: out}, nil
}

// killOrphans kills every process of this process's subtree that is not
// under a child it started, until none is left, at most timeout, and
// reaps the orphans; it returns how many it killed. What a tree whose
// reaper was killed left running is among them, wherever it went.
func killOrphans(timeout time.Duration) (int, error) {
	if ownerErr() != nil {
		return 0, nil // this process is no subreaper: nothing comes here
	}
	owner.scan.Lock()
	defer owner.scan.Unlock()
	killed := map[Proc]bool{}
	deadline := time.Now().Add(timeout)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		live, exited, err := orphans(true)
		if err != nil {
			return len(killed), err
		}
		for _, p := range exited {
			reapOrphan(p)
		}
		if len(live) == 0 {
			return len(killed), nil
		}
		for _, p := range live {
			if err := p.signal(unix.SIGKILL); err == nil {
				killed[p] = true
			}
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("proctree: %d orphaned processes still running after %s", len(live), timeout)
		}
		time.Sleep(pause) // until they are reparented here or reaped
	}
}

// reapOrphans reaps the children of this process that it did not start
// and that have exited.
func reapOrphans() {
	owner.scan.Lock()
	defer owner.scan.Unlock()
	_, exited, err := orphans(false)
	if err != nil {
		return
	}
	for _, p := range exited {
		reapOrphan(p)
	}
}

// reapOrphan reaps p, an exited child of this process it did not start,
// through a pidfd checked against p's start time: only p, never another
// child, whose status its Wait is owed.
func reapOrphan(p Proc) {
	owner.fds.RLock()
	defer owner.fds.RUnlock()
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if st, err := readStat(p.Pid); err != nil || st.start != p.Start || st.ppid != os.Getpid() {
		return
	}
	var info unix.Siginfo
	_ = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
}

// waitExited waits until pid, a child of this process, has exited and
// its children have been reparented, without reaping it.
func waitExited(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}
