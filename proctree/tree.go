//go:build linux

package proctree

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/internal/proctreehook"
)

// Starter starts process trees for one process and, with Sweep, kills
// the trees dead processes left. One per process is enough; it is safe
// for concurrent use.
type Starter struct {
	cfg      Config
	self     Proc
	cgParent string
	cgErr    error
	orphErr  error
	seq      atomic.Uint64
}

// New returns a starter; with CgroupAuto it finds out whether this
// process can make cgroups (Cgroups says).
func New(cfg Config) (*Starter, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	self, err := Self()
	if err != nil {
		return nil, err
	}
	s := &Starter{cfg: cfg, self: self, orphErr: becomeOwner()}
	if s.orphErr != nil {
		cfg.Log.Warn("this process does not take in what trees leave when their reapers are killed", "err", s.orphErr)
	}
	if cfg.Cgroups == CgroupAuto {
		s.cgParent, s.cgErr = findCgroupParent()
	} else {
		s.cgErr = errors.New("proctree: cgroups are off")
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("proctree: records folder: %w", err)
		}
	}
	return s, nil
}

// Dir is the folder of the records of running trees ("" for none).
func (s *Starter) Dir() string { return s.cfg.Dir }

// Cgroups returns the cgroup trees' cgroups are made under, or the reason
// there are none (then each tree's reaper alone finds its processes).
func (s *Starter) Cgroups() (string, error) { return s.cgParent, s.cgErr }

// Orphans says whether this process takes in and kills what a tree
// leaves when its reaper is killed (by the tree's own command, say): nil
// when it is a child subreaper that tells the children it started from
// orphans (Linux with pidfds), or the reason it is not. Without it and
// without cgroups, a tree that kills its reaper and drops MarkerEnv from
// its environment can leave a process running.
func (s *Starter) Orphans() error {
	if s.orphErr != nil {
		return s.orphErr
	}
	return ownerErr()
}

// Tree is a running command and everything it starts.
type Tree struct {
	s      *Starter
	reaper *exec.Cmd
	main   Proc
	marker string
	cgroup string
	record string
	label  string
	// stdin is the writing end of the pipe a Stdin that is not a file
	// is copied into.
	stdin *os.File
	// outputs are the reading ends of the pipes a Stdout or Stderr that
	// is not a file is copied from; copied is closed once every copier
	// has ended.
	outputs []*os.File
	copied  chan struct{}

	done   chan struct{}
	status Status
	err    error
	killed atomic.Bool
}

// Start starts c as a tree: under a reaper, a re-run of this executable
// that is a child subreaper for everything c starts, dies with this
// process, and stops every process of the tree (see Terminate and
// Kill); in a cgroup of its own where the starter has them; and with
// MarkerEnv in every process's environment. When c's main process exits,
// whatever it left running is killed. Start returns once the main process
// runs, or with the reason it could not be started.
func (s *Starter) Start(c Command) (*Tree, error) {
	path := c.Path
	if !strings.Contains(path, "/") {
		lp, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("proctree: %w", err)
		}
		path = lp
	}
	args := c.Args
	if len(args) == 0 {
		args = []string{c.Path}
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("proctree: marker: %w", err)
	}
	t := &Tree{s: s, marker: hex.EncodeToString(raw), label: c.Label, done: make(chan struct{})}
	n := s.seq.Add(1)
	if s.cgParent != "" {
		t.cgroup = filepath.Join(s.cgParent, fmt.Sprintf("%s%d-%d-%d", cgroupPrefix, s.self.Pid, s.self.Start, n))
		if err := os.Mkdir(t.cgroup, 0o755); err != nil {
			return nil, fmt.Errorf("proctree: make cgroup %s: %w", t.cgroup, err)
		}
	}
	fail := func(err error) (*Tree, error) {
		if t.cgroup != "" {
			_ = killCgroup(t.cgroup, s.cfg.KillTimeout)
		}
		return nil, err
	}
	// A Stdin that is not a file is copied into a pipe of the tree's
	// own, closed when the tree ends: os/exec's copier would keep Wait,
	// and so the tree's end, waiting for a reader that may never return.
	stdin, stdinCopy := c.Stdin, (*os.File)(nil)
	if _, isFile := stdin.(*os.File); stdin != nil && !isFile {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("proctree: stdin pipe: %w", err))
		}
		stdin, stdinCopy = r, w
		defer r.Close() // the reaper has its own
	}
	failPipe := fail
	fail = func(err error) (*Tree, error) {
		if stdinCopy != nil {
			stdinCopy.Close()
		}
		return failPipe(err)
	}
	// A Stdout or Stderr that is not a file is copied from a pipe of the
	// tree's own, as os/exec would, but by copiers the tree ends: os/exec
	// waits for its own only in Cmd.Wait, and a Start that fails has no
	// Wait to make.
	stdout, stderr, copies, err := t.outputPipes(c.Stdout, c.Stderr)
	failOut := fail
	fail = func(err error) (*Tree, error) {
		for _, cp := range copies {
			cp.w.Close()
		}
		for _, r := range t.outputs {
			r.Close()
		}
		return failOut(err)
	}
	if err != nil {
		return fail(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("proctree: status pipe: %w", err))
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	conf, _ := json.Marshal(reaperConfig{StatusFD: 3, Cgroup: t.cgroup, Parent: os.Getpid(), StartDelay: proctreehook.StartDelay()})
	env = append(withoutMarker(env), MarkerEnv+"="+t.marker, reaperEnv+"="+string(conf))
	t.reaper = &exec.Cmd{
		Path: "/proc/self/exe", Args: append([]string{reaperArg0, path}, args...),
		Env: env, Dir: c.Dir, Stdin: stdin, Stdout: stdout, Stderr: stderr,
		ExtraFiles: []*os.File{pw},
		// Its own group, so a terminal's signals reach it only through
		// the worker; SIGUSR1 when this process dies: kill the tree.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGUSR1},
	}
	err = spawn(t.reaper)
	pw.Close()
	if err != nil {
		pr.Close()
		return fail(fmt.Errorf("proctree: start reaper for %s: %w", path, err))
	}
	t.startCopies(copies)
	_ = pr.SetReadDeadline(time.Now().Add(s.cfg.StartTimeout))
	status := bufio.NewReader(pr)
	line, rerr := status.ReadString('\n')
	if pid, start, ok := parseStarted(line); ok {
		t.main = Proc{Pid: pid, Start: start}
	} else {
		// The reaper could not start the command: it has exited, or is
		// about to. Or its command killed it before it could say so:
		// what that left is this process's orphans now, or carries the
		// marker.
		_ = t.reaper.Process.Kill()
		waitExited(t.reaper.Process.Pid)
		_, _ = killOrphans(s.cfg.KillTimeout)
		_, _ = killMarked(t.marker, s.cfg.KillTimeout)
		werr := t.reaper.Wait()
		// What the command wrote before is copied to the end, unless
		// something outside the tree holds the output open; a writer
		// that blocks until its reader reads (after Start returns) is
		// given up on.
		if !t.stopCopies() {
			select {
			case <-t.copied:
			case <-time.After(outputDelay):
			}
		}
		pr.Close()
		msg, _ := strings.CutPrefix(strings.TrimSpace(line), "error ")
		switch {
		case msg != "":
			err = errors.New(msg)
		case errors.Is(rerr, io.EOF):
			// Only the reaper writes the pipe, and it says why before
			// it exits: it was killed, by its command most likely.
			err = fmt.Errorf("%w (%v)", ErrReaperKilled, werr)
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			// Killed above, silent for StartTimeout: its command may have
			// started and run that long.
			err = fmt.Errorf("%w (no report within %s; %v)", ErrReaperKilled, s.cfg.StartTimeout, werr)
		case rerr != nil:
			err = fmt.Errorf("reaper said nothing (%v; %v)", rerr, werr)
		default:
			err = fmt.Errorf("reaper said %q", line)
		}
		return fail(fmt.Errorf("proctree: start %s: %w", path, err))
	}
	_ = pr.SetReadDeadline(time.Time{})
	checkStarted(t.reaper.Process.Pid)
	if s.cfg.Dir != "" {
		t.record = filepath.Join(s.cfg.Dir, fmt.Sprintf("%d-%d-%d.json", s.self.Pid, s.self.Start, n))
		reaper, _ := procOf(t.reaper.Process.Pid)
		if err := writeRecord(t.record, Record{Owner: s.self, Reaper: reaper, Main: t.main, Marker: t.marker, Cgroup: t.cgroup, Label: t.label, Started: time.Now().UTC()}); err != nil {
			s.cfg.Log.Warn("process tree runs without a record; a crash of this process with its reaper would leave it running", "tree", t.label, "err", err)
			t.record = ""
		}
	}
	if stdinCopy != nil {
		t.stdin = stdinCopy
		go func() {
			// Until the reader ends, or the tree does (a write then fails);
			// a read that blocks past the tree's end ends with the reader.
			_, _ = io.Copy(stdinCopy, c.Stdin)
			stdinCopy.Close()
		}()
	}
	go t.watch(pr, status)
	return t, nil
}

func parseStarted(line string) (pid int, start uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "started" {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[2], 10, 64)
	return pid, start, err1 == nil && err2 == nil && pid > 0
}

// watch waits for the reaper, reads the main process's status, makes
// sure nothing of the tree is left and removes its cgroup and record.
func (t *Tree) watch(pipe *os.File, status *bufio.Reader) {
	defer close(t.done)
	defer pipe.Close()
	// The reaper's last words: the pipe ends when it does, its only
	// writer.
	rest, _ := io.ReadAll(io.LimitReader(status, 4<<10))
	clean := false
	for line := range strings.SplitSeq(strings.TrimSpace(string(rest)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "exit":
			n, _ := strconv.Atoi(f[1])
			t.status, clean = Status{ExitCode: n}, true
		case "signal":
			n, _ := strconv.Atoi(f[1])
			t.status, clean = Status{ExitCode: -1, Signal: syscall.Signal(n)}, true
		case "error":
			t.err = fmt.Errorf("proctree: %s: %s", t.label, strings.TrimPrefix(line, "error "))
		}
	}
	if !clean {
		// The reaper was killed (by its own command, say) before it had
		// killed the tree: its command died with it (its death signal),
		// and what else ran was reparented to this process, a subreaper,
		// where it is killed at once, before it can do more. The pipe
		// ends before the reaper's children are reparented: first wait
		// for that, the reaper's exit proper.
		waitExited(t.reaper.Process.Pid)
		n, err := killOrphans(t.s.cfg.KillTimeout)
		if err != nil || n > 0 {
			t.s.cfg.Log.Warn("killed processes a tree left behind when its reaper was killed", "tree", t.label, "processes", n, "err", err)
		}
	}
	werr := t.reaper.Wait()
	if t.stdin != nil {
		t.stdin.Close()
	}
	if !clean && t.err == nil {
		t.status = Status{ExitCode: -1, Signal: syscall.SIGKILL}
		if !t.killed.Load() {
			t.err = fmt.Errorf("proctree: %s: the reaper ended without a status (%v)", t.label, werr)
		}
	}
	if t.cgroup != "" {
		if err := killCgroup(t.cgroup, t.s.cfg.KillTimeout); err != nil {
			t.s.cfg.Log.Warn("process tree's cgroup not removed", "tree", t.label, "err", err)
		}
	}
	if !clean {
		// Where this process is no subreaper, the marker still finds what
		// kept it.
		if n, err := killMarked(t.marker, t.s.cfg.KillTimeout); err != nil || n > 0 {
			t.s.cfg.Log.Warn("killed processes a tree left behind", "tree", t.label, "processes", n, "err", err)
		}
	}
	// Once nothing of the tree can write any more: what it wrote is
	// copied to the end (os/exec's Wait waits so for its copiers too).
	t.stopCopies()
	<-t.copied
	if t.record != "" {
		_ = os.Remove(t.record)
	}
}

// outputDelay bounds how long the copy of a tree's output waits for the
// output's end once the tree is gone: a process outside the tree (one
// it handed the pipe to) may hold it open for good.
const outputDelay = time.Second

// outputCopy is a pipe a Stdout or Stderr that is not a file is copied
// from: w is the reaper's end, r is t.outputs's.
type outputCopy struct {
	to   io.Writer
	r, w *os.File
}

// outputPipes returns what the reaper is given for stdout and stderr:
// a file as it is, a pipe for any other writer (one for both where
// they are the same writer, as os/exec does).
func (t *Tree) outputPipes(stdout, stderr io.Writer) (io.Writer, io.Writer, []outputCopy, error) {
	var copies []outputCopy
	pipe := func(w io.Writer) (io.Writer, error) {
		if w == nil {
			return nil, nil
		}
		if _, isFile := w.(*os.File); isFile {
			return w, nil
		}
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("proctree: output pipe: %w", err)
		}
		t.outputs = append(t.outputs, r)
		copies = append(copies, outputCopy{to: w, r: r, w: pw})
		return pw, nil
	}
	out, err := pipe(stdout)
	if err != nil {
		return nil, nil, copies, err
	}
	if len(copies) == 1 && sameWriter(stdout, stderr) {
		return out, out, copies, nil
	}
	errOut, err := pipe(stderr)
	return out, errOut, copies, err
}

// sameWriter reports a == b, false where they cannot be compared.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// startCopies closes the reaper's ends of the output pipes (it holds its
// own) and copies each into its writer.
func (t *Tree) startCopies(copies []outputCopy) {
	t.copied = make(chan struct{})
	var wg sync.WaitGroup
	for _, cp := range copies {
		cp.w.Close()
		wg.Go(func() { copyOutput(cp.to, cp.r) })
	}
	go func() {
		wg.Wait()
		close(t.copied)
	}()
}

// copyOutput copies r into w until r ends or is closed.
func copyOutput(w io.Writer, r *os.File) {
	_, _ = io.Copy(w, r)
}

// stopCopies waits, at most outputDelay, for the copy of the tree's
// output to reach its end (every holder of the pipes gone), then closes
// the pipes' reading ends: a copier still waiting on a holder outside
// the tree stops at once, one in a Write to its writer once that Write
// returns. It reports whether the copiers had ended.
func (t *Tree) stopCopies() bool {
	timer := time.NewTimer(outputDelay)
	defer timer.Stop()
	ended := true
	select {
	case <-t.copied:
	case <-timer.C:
		ended = false
	}
	for _, r := range t.outputs {
		r.Close()
	}
	return ended
}

// Pid is the main process's pid.
func (t *Tree) Pid() int { return t.main.Pid }

// Running reports whether the main process still runs, asking the kernel
// rather than waiting for the reaper's report.
func (t *Tree) Running() bool {
	select {
	case <-t.done:
		return false
	default:
		return t.main.Alive()
	}
}

// Done is closed once every process of the tree is gone.
func (t *Tree) Done() <-chan struct{} { return t.done }

// Terminate sends SIGTERM to every process of the tree.
func (t *Tree) Terminate() error {
	err := t.reaper.Process.Signal(syscall.SIGTERM)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Kill kills every process of the tree and waits until they are gone, at
// most the starter's KillTimeout: a reaper that does not do it in time is
// killed, and the tree's cgroup and marker are used instead.
func (t *Tree) Kill() error {
	t.killed.Store(true)
	if err := t.reaper.Process.Signal(syscall.SIGUSR1); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("proctree: kill %s: %w", t.label, err)
	}
	timer := time.NewTimer(t.s.cfg.KillTimeout)
	defer timer.Stop()
	select {
	case <-t.done:
		return nil
	case <-timer.C:
	}
	_ = t.reaper.Process.Kill() // watch then kills by cgroup and marker
	timer.Reset(t.s.cfg.KillTimeout)
	select {
	case <-t.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("proctree: %s: processes still running %s after the kill", t.label, 2*t.s.cfg.KillTimeout)
	}
}

// Wait waits until every process of the tree is gone and returns how the
// main process ended. The error is set when the reaper failed (its
// status is then a guess).
func (t *Tree) Wait() (Status, error) {
	<-t.done
	return t.status, t.err
}

// spawner starts processes from one goroutine whose thread never exits:
// a child's parent-death signal is tied to the thread that forked it, and
// Go ends a thread when a goroutine locked to it exits.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // for good: never unlocked
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}
