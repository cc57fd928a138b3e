//go:build linux

package proctree

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaperArg0 is a reaper's argv[0], as ps shows it.
const reaperArg0 = "jetloop-proctree"

// reaperConfig is what a reaper is told.
type reaperConfig struct {
	// StatusFD is the descriptor it reports on.
	StatusFD int `json:"status_fd"`
	// Cgroup is the cgroup its command starts in; empty for none.
	Cgroup string `json:"cgroup,omitempty"`
	// Parent is the pid of the process that started it.
	Parent int `json:"parent"`
	// StartDelay holds the report of the command's start back (set by
	// tests only, to make a command that kills its reaper do so first).
	StartDelay time.Duration `json:"start_delay,omitempty"`
}

// A binary that links this package can run as a reaper: the process
// that starts a tree starts its own executable again with reaperEnv set,
// and that process becomes the tree's reaper before anything else of the
// program runs.
func init() {
	if v, ok := os.LookupEnv(reaperEnv); ok {
		// Straight to the kernel: nothing is buffered, and a binary built
		// with -race would sleep a second in os.Exit.
		syscall.Exit(reap(v))
	}
}

// reap is the main of a reaper: a child subreaper that starts the command
// in os.Args[1:] and, since every orphan of the tree is reparented to it,
// can find, signal and reap every process of the tree. It reports on its
// status descriptor "started <pid> <start>", then "exit <code>" or
// "signal <number>" once every process of the tree is gone, or "error
// <reason>".
//
// Signals: SIGTERM (and SIGINT, SIGHUP) is passed to every process of
// the tree; SIGUSR1 (also what the reaper gets when its parent dies)
// kills every process of the tree. When the command exits, whatever it
// left running is killed.
func reap(conf string) int {
	// A child's parent-death signal follows the thread that forked it:
	// the main goroutine keeps this thread for good.
	runtime.LockOSThread()
	var c reaperConfig
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		fmt.Fprintf(os.Stderr, "%s: bad %s: %v\n", reaperArg0, reaperEnv, err)
		return 2
	}
	// Inherited without close-on-exec: the command must not get it.
	syscall.CloseOnExec(c.StatusFD)
	status := os.NewFile(uintptr(c.StatusFD), "status")
	report := func(format string, args ...any) {
		fmt.Fprintf(status, format+"\n", args...)
	}
	os.Unsetenv(reaperEnv)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report("error become a child subreaper: %v", err)
		return 1
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGCHLD)
	// The parent may have died before the handler was in place, its
	// death signal lost.
	if os.Getppid() != c.Parent {
		report("error the process that started the tree is gone")
		return 1
	}
	if len(os.Args) < 3 {
		report("error no command")
		return 1
	}
	cmd := &exec.Cmd{Path: os.Args[1], Args: os.Args[2:], Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	if c.Cgroup != "" {
		fd, err := unix.Open(c.Cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			report("error open cgroup %s: %v", c.Cgroup, err)
			return 1
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		report("error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	child := cmd.Process.Pid
	st, err := readStat(child)
	if err != nil {
		st.start = 0 // it exited already; it is reaped below
	}
	if c.StartDelay > 0 {
		time.Sleep(c.StartDelay)
	}
	report("started %d %d", child, st.start)

	var childStatus *unix.WaitStatus
	killing := false
	var pause *time.Timer
	for {
		// Reap every child that has exited: the command, and orphans of
		// the tree, which come here.
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err == unix.ECHILD {
				// No child left, so no process of the tree.
				finish(c, report, childStatus)
				return 0
			}
			if err != nil || pid <= 0 {
				break
			}
			if pid == child {
				childStatus, killing = &ws, true
			}
		}
		if killing {
			killTree(c.Cgroup)
			if pause == nil {
				pause = time.NewTimer(5 * time.Millisecond)
			} else {
				pause.Reset(5 * time.Millisecond)
			}
			select {
			case s := <-sigs:
				pause.Stop()
				_ = s // a SIGCHLD (or another signal: killing already)
			case <-pause.C:
			}
			continue
		}
		switch <-sigs {
		case unix.SIGTERM, unix.SIGINT, unix.SIGHUP:
			signalTree(unix.SIGTERM)
		case unix.SIGUSR1:
			killing = true
		}
	}
}

// finish removes the tree's cgroup and reports the command's status.
func finish(c reaperConfig, report func(string, ...any), ws *unix.WaitStatus) {
	if c.Cgroup != "" {
		_ = os.Remove(c.Cgroup) // empty now; what remains is for the starter to remove
	}
	switch {
	case ws == nil:
		report("error the command's status was lost")
	case ws.Signaled():
		report("signal %d", int(ws.Signal()))
	default:
		report("exit %d", ws.ExitStatus())
	}
}

// killTree kills every process of the tree: the cgroup at once when there
// is one, and every descendant found by the walk.
func killTree(cgroup string) {
	if cgroup != "" {
		_ = os.WriteFile(cgroup+"/cgroup.kill", []byte("1"), 0)
	}
	signalTree(unix.SIGKILL)
}

// signalTree sends sig to every descendant of the reaper.
func signalTree(sig unix.Signal) {
	ds, err := descendants(os.Getpid())
	if err != nil {
		return
	}
	for _, p := range ds {
		_ = p.signal(sig)
	}
}
