//go:build linux

package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// stat is what the tree walks read of /proc/<pid>/stat.
type stat struct {
	pid, ppid int
	state     byte
	start     uint64
}

// readStat reads /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses: the fields after it start after the last ')'.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("proctree: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, fmt.Errorf("proctree: /proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, fmt.Errorf("proctree: /proc/%d/stat: ppid %q", pid, f[1])
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("proctree: /proc/%d/stat: starttime %q", pid, f[19])
	}
	return stat{pid: pid, ppid: ppid, state: f[0][0], start: start}, nil
}

// Self is the calling process.
func Self() (Proc, error) {
	st, err := readStat(os.Getpid())
	if err != nil {
		return Proc{}, err
	}
	return Proc{Pid: st.pid, Start: st.start}, nil
}

// procOf names the running process pid; an error when there is none.
func procOf(pid int) (Proc, error) {
	st, err := readStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{Pid: pid, Start: st.start}, nil
}

// Alive reports whether p still runs (a zombie does not).
func (p Proc) Alive() bool {
	st, err := readStat(p.Pid)
	return err == nil && st.start == p.Start && st.state != 'Z' && st.state != 'X'
}

// pids lists the numeric entries of /proc.
func pids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("proctree: list /proc: %w", err)
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// descendants lists every living descendant of root, found by their
// parent links; zombies are left to whoever reaps them.
func descendants(root int) ([]Proc, error) {
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
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			queue = append(queue, c.pid)
			if c.state != 'Z' && c.state != 'X' {
				out = append(out, Proc{Pid: c.pid, Start: c.start})
			}
		}
	}
	return out, nil
}

// withMarker lists every living process whose environment holds
// MarkerEnv=marker: what a tree started, wherever it went since.
func withMarker(marker string) ([]Proc, error) {
	all, err := pids()
	if err != nil {
		return nil, err
	}
	want := []byte(MarkerEnv + "=" + marker + "\x00")
	self := os.Getpid()
	var out []Proc
	for _, pid := range all {
		if pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || !bytes.HasPrefix(env, want) && !bytes.Contains(env, append([]byte{0}, want...)) {
			continue
		}
		if p, err := procOf(pid); err == nil && p.Alive() {
			out = append(out, p)
		}
	}
	return out, nil
}

// signal sends sig to p if p is still the process it names: through a
// pidfd opened first and checked against p's start time, so a pid reused
// since p was read is never signalled. A process that is gone is not an
// error.
func (p Proc) signal(sig unix.Signal) error {
	// Not to be taken for a child this process started (see owner).
	owner.fds.RLock()
	defer owner.fds.RUnlock()
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.3: check, then kill, with the small window
		// between.
		if !p.Alive() {
			return nil
		}
		if err := unix.Kill(p.Pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("proctree: signal %d to %s: %w", sig, p, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("proctree: pidfd of %s: %w", p, err)
	}
	defer unix.Close(fd)
	// The pidfd pins the process: if it is still p now, the signal
	// reaches p and no other.
	if st, err := readStat(p.Pid); err != nil || st.start != p.Start {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("proctree: signal %d to %s: %w", sig, p, err)
	}
	return nil
}
