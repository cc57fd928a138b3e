//go:build linux

package proctree_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/proctreehook"
	"github.com/jetloop/jetloop/proctree"
)

// ownerEnv makes the test binary an owner process: it starts the tree
// that ownerScript names, prints the tree's output and its reaper's pid,
// and waits to be killed.
const ownerEnv = "PROCTREE_TEST_OWNER"

func TestMain(m *testing.M) {
	if v := os.Getenv(ownerEnv); v != "" {
		runOwner(v)
		return
	}
	os.Exit(m.Run())
}

// runOwner is the owner process: "<cgroup mode>|<records dir>|<script>".
func runOwner(v string) {
	f := strings.SplitN(v, "|", 3)
	s, err := proctree.New(proctree.Config{Cgroups: proctree.CgroupMode(f[0]), Dir: f[1]})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	t, err := s.Start(proctree.Command{Path: "/bin/sh", Args: []string{"sh", "-c", f[2]}, Stdout: os.Stdout, Label: "owner test"})
	if err != nil {
		// A command that kills its reaper may do so before the reaper
		// said it started: what it announced must be gone all the same.
		fmt.Printf("tree not started (%s): 0\n", strings.ReplaceAll(err.Error(), "\n", " "))
		select {}
	}
	fmt.Printf("tree %d\n", t.Pid())
	select {} // until killed
}

// modes are the ways a tree is found: by its cgroup where this machine
// allows one, and by its reaper alone.
func modes(t *testing.T) []proctree.CgroupMode {
	s, err := proctree.New(proctree.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cgroups(); err != nil {
		t.Logf("no cgroups here (%v): only the reaper is tested", err)
		return []proctree.CgroupMode{proctree.CgroupOff}
	}
	return []proctree.CgroupMode{proctree.CgroupAuto, proctree.CgroupOff}
}

func name(m proctree.CgroupMode) string {
	if m == proctree.CgroupAuto {
		return "cgroup"
	}
	return "reaper only"
}

// pidsFrom reads n pids, one a line, from r.
func pidsFrom(t *testing.T, r *bufio.Reader, n int) []int {
	t.Helper()
	pids, _ := linesFrom(t, r, n)
	return pids
}

// linesFrom reads n lines ending in a pid from r, and returns the pids and
// the lines.
func linesFrom(t *testing.T, r *bufio.Reader, n int) ([]int, []string) {
	t.Helper()
	out := make([]int, 0, n)
	var texts []string
	lines := make(chan string)
	go func() {
		defer close(lines)
		for range n {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	for range n {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("output ended after %d pids", len(out))
			}
			f := strings.Fields(line)
			pid, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				t.Fatalf("not a pid: %q", line)
			}
			out, texts = append(out, pid), append(texts, line)
		case <-time.After(30 * time.Second):
			t.Fatalf("no pid after %d", len(out))
		}
	}
	return out, texts
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		for _, p := range pids {
			if alive(p) {
				return fmt.Errorf("process %d still runs", p)
			}
		}
		return nil
	})
}

func mustAlive(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, p := range pids {
		if !alive(p) {
			t.Fatalf("%s: process %d is not running", what, p)
		}
	}
}

// Every shape of escape from a process group dies with the tree: a setsid
// child, a double fork whose middle process exits, a child that ignores
// SIGTERM; and what the command leaves running when it exits.
func TestTreeDiesWhole(t *testing.T) {
	tests := []struct {
		name   string
		script string
		pids   int
		// terminate sends SIGTERM first and checks that the pids that
		// ignore it still run.
		terminate bool
		// exits: the command ends by itself; its leftovers must not.
		exits bool
	}{
		{name: "setsid child", script: `setsid sleep 1000 & echo $!; wait`, pids: 1},
		{name: "double fork", script: `sh -c 'sleep 1000 & echo $!' & wait; sleep 1000`, pids: 1},
		{name: "double fork with setsid", script: `sh -c 'setsid sh -c "sleep 1000 & echo \$!; wait" &' ; sleep 1000`, pids: 1},
		{name: "child ignoring SIGTERM", script: `sh -c 'trap "" TERM; echo $$; while :; do sleep 1; done' & wait`, pids: 1, terminate: true},
		{name: "leftovers of a command that exits", script: `setsid sleep 1000 & echo $!; sh -c 'sleep 1000 & echo $!'`, pids: 2, exits: true},
	}
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			s, err := proctree.New(proctree.Config{Cgroups: mode, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					pr, pw := io.Pipe()
					tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", tt.script}, Stdout: pw, Label: tt.name})
					if err != nil {
						t.Fatal(err)
					}
					defer pw.Close()
					go func() { _, _ = tree.Wait(); pw.Close() }()
					pids := pidsFrom(t, bufio.NewReader(pr), tt.pids)
					go func() { _, _ = io.Copy(io.Discard, pr) }()
					if tt.exits {
						st, err := tree.Wait()
						if err != nil || st.ExitCode != 0 {
							t.Fatalf("status %+v, %v", st, err)
						}
						waitGone(t, pids...)
						return
					}
					mustAlive(t, "before the kill", pids...)
					if tt.terminate {
						if err := tree.Terminate(); err != nil {
							t.Fatal(err)
						}
						// The main process takes SIGTERM; the tree then
						// ends, and the one that ignored it is killed.
						st, err := tree.Wait()
						if err != nil || st.Signal != syscall.SIGTERM {
							t.Fatalf("after SIGTERM: %+v, %v", st, err)
						}
						waitGone(t, pids...)
						return
					}
					if err := tree.Kill(); err != nil {
						t.Fatal(err)
					}
					select {
					case <-tree.Done():
					default:
						t.Fatal("Kill returned before the tree was gone")
					}
					waitGone(t, pids...)
					if st, err := tree.Wait(); err != nil || st.Signal != syscall.SIGKILL {
						t.Fatalf("after Kill: %+v, %v", st, err)
					}
				})
			}
			if left, _ := os.ReadDir(s.Dir()); len(left) > 0 {
				t.Fatalf("records left after every tree ended: %v", left)
			}
		})
	}
}

// A SIGTERM that the main process ignores leaves the tree running; Kill
// then ends it.
func TestTerminateIgnoredThenKill(t *testing.T) {
	s, err := proctree.New(proctree.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", `trap "" TERM; setsid sh -c 'trap "" TERM; echo $$; while :; do sleep 1; done' & wait`}, Stdout: pw})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	pids := pidsFrom(t, bufio.NewReader(pr), 1)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err := tree.Terminate(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tree.Done():
		t.Fatal("a tree that ignores SIGTERM ended on it")
	case <-time.After(300 * time.Millisecond): // long enough for SIGTERM to have been passed on and ignored
	}
	mustAlive(t, "after an ignored SIGTERM", append(pids, tree.Pid())...)
	if err := tree.Kill(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, append(pids, tree.Pid())...)
}

func TestStartErrors(t *testing.T) {
	s, err := proctree.New(proctree.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(proctree.Command{Path: "/nonexistent/tool"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/tool") {
		t.Fatalf("a program that does not exist: %v", err)
	}
	if _, err := s.Start(proctree.Command{Path: "no-such-program-anywhere"}); err == nil {
		t.Fatal("a program not in PATH started")
	}
	tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", "exit 3"}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tree.Wait(); err != nil || st.ExitCode != 3 {
		t.Fatalf("exit 3: %+v, %v", st, err)
	}
}

// owner starts the test binary as an owner process running script, and
// returns it with the n pids the script printed.
func owner(t *testing.T, mode proctree.CgroupMode, dir, script string, n int) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+string(mode)+"|"+dir+"|"+script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	all, lines := linesFrom(t, bufio.NewReader(out), n+1)
	var pids []int
	for i, l := range lines {
		if !strings.HasPrefix(l, "tree ") {
			pids = append(pids, all[i])
		}
	}
	return cmd, pids
}

// kill -9 of the process that started a tree stops the whole tree: its
// reaper gets the parent-death signal and kills everything.
func TestOwnerKilledTakesTheTree(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			cmd, pids := owner(t, mode, t.TempDir(), `setsid sh -c 'sleep 1000 & echo $!; wait' & sh -c 'trap "" TERM; sleep 1000 & echo $!' ; wait`, 2)
			mustAlive(t, "before the kill", pids...)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			waitGone(t, pids...)
		})
	}
}

// When the owner dies with the reaper (both killed at once), what the tree
// left runs on until Sweep in the next process, which kills it by cgroup
// or by marker.
func TestSweepKillsWhatADeadOwnerLeft(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			dir := t.TempDir()
			cmd, pids := owner(t, mode, dir, `setsid sh -c 'sleep 1000 & echo $!; wait' & wait`, 1)
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != 1 {
				t.Fatalf("records: %v, %v", ents, err)
			}
			rec, err := proctree.ReadRecord(dir + "/" + ents[0].Name())
			if err != nil {
				t.Fatal(err)
			}
			// Stop the owner so it cannot clean up, kill its reaper, then
			// the owner: as the OOM killer or kill -9 of both would.
			_ = cmd.Process.Signal(syscall.SIGSTOP)
			_ = syscall.Kill(rec.Reaper.Pid, syscall.SIGKILL)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			waitGone(t, rec.Reaper.Pid)
			mustAlive(t, "after owner and reaper died", pids...)

			s, err := proctree.New(proctree.Config{Cgroups: mode, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			swept, err := s.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(swept) == 0 || swept[0].Label != "owner test" {
				t.Fatalf("swept %+v", swept)
			}
			waitGone(t, pids...)
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("records left after the sweep: %v", left)
			}
			// A second sweep finds nothing.
			if again, err := s.Sweep(context.Background()); err != nil || len(again) != 0 {
				t.Fatalf("second sweep: %+v, %v", again, err)
			}
		})
	}
}

// Sweep leaves the trees of running processes alone, its own included.
func TestSweepLeavesLiveOwners(t *testing.T) {
	dir := t.TempDir()
	_, pids := owner(t, proctree.CgroupAuto, dir, `sleep 1000 & echo $!; wait`, 1)
	s, err := proctree.New(proctree.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := s.Start(proctree.Command{Path: "sleep", Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Kill()
	swept, err := s.Sweep(context.Background())
	if err != nil || len(swept) != 0 {
		t.Fatalf("swept %+v, %v", swept, err)
	}
	mustAlive(t, "after a sweep", append(pids, mine.Pid())...)
}

// A tree whose command kills its reaper still ends: what it left running
// (here holding the tree's stdout) is killed, and Wait returns.
func TestReaperKilledByItsCommand(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			s, err := proctree.New(proctree.Config{Cgroups: mode, KillTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			pr, pw := io.Pipe()
			defer pw.Close()
			tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", `setsid sleep 1000 & echo $!; kill -9 $PPID; wait`}, Stdout: pw, Label: "kills its reaper"})
			pids := pidsFrom(t, bufio.NewReader(pr), 1)
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			defer syscall.Kill(pids[0], syscall.SIGKILL)
			if err != nil {
				// Killed before the reaper said it started the command.
				t.Logf("start: %v", err)
				waitGone(t, pids...)
				return
			}
			select {
			case <-tree.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the tree never ended after its command killed its reaper")
			}
			if _, err := tree.Wait(); err == nil {
				t.Fatal("Wait: no error for a reaper that ended without a status")
			}
			waitGone(t, pids...)
		})
	}
}

// TestStartFailsAfterItsCommandKilledTheReaper makes the command kill
// its reaper before the reaper reports the start, for sure (the reaper
// holds its report back), while a process outside the tree holds the
// command's output open, so the pipe outlives everything of the tree:
// Start fails, what the command started is gone, and once Start returns
// nothing copies into the caller's writer any more, which is safe to
// read and holds what the command wrote.
func TestStartFailsAfterItsCommandKilledTheReaper(t *testing.T) {
	defer proctreehook.SetStartDelay(time.Minute)()
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			s, err := proctree.New(proctree.Config{Cgroups: mode, KillTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			script := `setsid sleep 1000 & echo $! > sleep.pid; echo out; echo $$ > sh.tmp; mv sh.tmp sh.pid
while [ ! -e ready ]; do sleep 0.01; done; kill -9 $PPID; wait`
			before := copiers()
			var out bytes.Buffer
			type result struct {
				tree *proctree.Tree
				err  error
			}
			done := make(chan result, 1)
			go func() {
				tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", script}, Dir: dir, Stdout: &out, Label: "kills its reaper first"})
				done <- result{tree, err}
			}()
			var shPid int
			natstest.WaitFor(t, 20*time.Second, func() error {
				b, err := os.ReadFile(filepath.Join(dir, "sh.pid"))
				if err != nil {
					return err
				}
				shPid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				return err
			})
			holder := exec.Command("sh", "-c", fmt.Sprintf(`exec 3>/proc/%d/fd/1 && touch ready && exec sleep 1000`, shPid))
			holder.Dir = dir
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = holder.Process.Kill()
				_ = holder.Wait()
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Start did not return after its command killed the reaper")
			}
			if r.err == nil {
				_ = r.tree.Kill()
				t.Fatal("Start succeeded, though the command killed its reaper before the reaper reported the start")
			}
			if !errors.Is(r.err, proctree.ErrReaperKilled) {
				t.Errorf("Start: %v, want ErrReaperKilled: the command ran", r.err)
			}
			// At once: under -race, a copier still writing is caught here.
			if got := out.String(); got != "out\n" {
				t.Errorf("the caller's writer holds %q, want what the command wrote", got)
			}
			if n := copiers(); n > before {
				t.Errorf("%d goroutines still copying the tree's output after Start returned", n-before)
			}
			b, err := os.ReadFile(filepath.Join(dir, "sleep.pid"))
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(pid, syscall.SIGKILL)
			waitGone(t, pid, shPid)
		})
	}
}

// TestStartTimesOutOnACommandThatRuns holds the reaper's report of the
// start past StartTimeout while its command runs: Start kills the
// reaper and fails, and says that the command may have run (it did),
// not that it could not start; nothing of it is left.
func TestStartTimesOutOnACommandThatRuns(t *testing.T) {
	// StartTimeout leaves a loaded machine time to start the shell: the
	// command must have run before the reaper is killed.
	defer proctreehook.SetStartDelay(time.Minute)()
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			s, err := proctree.New(proctree.Config{Cgroups: mode, StartTimeout: 10 * time.Second, KillTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			script := `setsid sleep 1000 & echo $! > sleep.tmp; mv sleep.tmp sleep.pid; wait`
			tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", script}, Dir: dir, Label: "runs past the start timeout"})
			if err == nil {
				_ = tree.Kill()
				t.Fatal("Start succeeded, though the reaper did not report the start within StartTimeout")
			}
			b, rerr := os.ReadFile(filepath.Join(dir, "sleep.pid"))
			if rerr != nil {
				t.Fatalf("the command did not run within StartTimeout (%v): Start: %v", rerr, err)
			}
			pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
			if perr != nil {
				t.Fatal(perr)
			}
			defer syscall.Kill(pid, syscall.SIGKILL)
			if !errors.Is(err, proctree.ErrReaperKilled) {
				t.Errorf("Start: %v, want ErrReaperKilled: the command ran", err)
			}
			waitGone(t, pid)
		})
	}
}

// copiers counts the goroutines that copy a process's output into a
// writer (os/exec's, or the tree's own).
func copiers() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "os/exec.(*Cmd).writerDescriptor") || strings.Contains(g, "proctree.copyOutput") {
			n++
		}
	}
	return n
}

// pidsUntilEOF reads lines ending in a pid from r until it ends: until
// every process holding the writing end is gone.
func pidsUntilEOF(t *testing.T, r io.Reader, cleanup func([]int)) []int {
	t.Helper()
	got := make(chan int, 1024)
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			pid, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				done <- fmt.Errorf("not a pid: %q", sc.Text())
				return
			}
			got <- pid
		}
		done <- sc.Err()
	}()
	var pids []int
	timeout := time.After(30 * time.Second)
	for {
		select {
		case pid := <-got:
			pids = append(pids, pid)
		case err := <-done:
			for len(got) > 0 {
				pids = append(pids, <-got)
			}
			if err != nil {
				t.Fatal(err)
			}
			return pids
		case <-timeout:
			cleanup(pids)
			t.Fatalf("the tree's output never ended: something of it still runs (%d pids read: %v)", len(pids), pids)
		}
	}
}

func killAll(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// escape is a command that starts prog 1000 in a session of its own and
// without MarkerEnv, announces its pid, kills its reaper once the marker
// is gone from prog's environment, and sleeps.
func escape(prog string) string {
	return `setsid env -i ` + prog + ` 1000 </dev/null >/dev/null 2>&1 & p=$!; echo $p
while grep -q ` + proctree.MarkerEnv + `= /proc/$p/environ 2>/dev/null; do :; done
kill -9 $PPID; sleep 1000`
}

// A command that kills its reaper cannot leave anything running: not a
// setsid child that dropped MarkerEnv (env -i) and so cannot be found by
// it, not one that also changed its name, not what double forks on after
// the reaper is dead. Without a cgroup, all of it was reparented to this
// process, a child subreaper, and is killed there.
func TestEscapeAfterTheReaperIsKilled(t *testing.T) {
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, dir+"/sshd"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, script string
	}{
		{name: "setsid without the marker", script: escape("sleep")},
		{name: "renamed without the marker", script: escape(dir + "/sshd")},
		// The child kills the reaper after its first double fork, and
		// goes on double forking: each grandchild, in a session of its
		// own and without the marker, is an orphan the moment its parent
		// exits.
		{name: "double forks after the kill", script: `sh -c 'i=0; while [ $i -lt 200 ]; do setsid env -i sh -c "sleep 1000 </dev/null >/dev/null 2>&1 & echo \$!"; [ $i = 0 ] && kill -9 $1; i=$((i+1)); done; sleep 1000' x $PPID & echo $!; wait`},
	}
	for _, mode := range modes(t) {
		t.Run(name(mode), func(t *testing.T) {
			s, err := proctree.New(proctree.Config{Cgroups: mode, KillTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if mode == proctree.CgroupOff {
				if err := s.Orphans(); err != nil {
					t.Fatalf("this process does not take orphans in: %v", err)
				}
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					pr, pw, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					defer pr.Close()
					tree, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", tt.script}, Stdout: pw, Label: tt.name})
					pw.Close() // the tree has its own
					pids := pidsUntilEOF(t, pr, killAll)
					defer killAll(pids)
					if err != nil {
						// The command killed its reaper before the reaper
						// said it had started it: Start fails, and nothing
						// may be left either.
						t.Logf("start: %v", err)
						waitGone(t, pids...)
						return
					}
					if len(pids) == 0 {
						t.Fatal("the tree announced no process")
					}
					t.Logf("%d processes announced", len(pids))
					select {
					case <-tree.Done():
					case <-time.After(30 * time.Second):
						t.Fatal("the tree never ended after its command killed its reaper")
					}
					if _, err := tree.Wait(); err == nil {
						t.Fatal("Wait: no error for a reaper that ended without a status")
					}
					waitGone(t, pids...)
				})
			}
		})
	}
}

// What takes in the orphans of a killed reaper kills only them: a child
// this process started outside any tree, a stdio server (as an MCP
// server's) with and without a tree, another tree's setsid child all run
// on, and a child that has exited keeps its status for its Wait.
func TestOrphansKilledOthersSpared(t *testing.T) {
	s, err := proctree.New(proctree.Config{Cgroups: proctree.CgroupOff, KillTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Orphans(); err != nil {
		t.Fatalf("this process does not take orphans in: %v", err)
	}
	plain := exec.Command("sleep", "1000")
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Process.Kill(); _ = plain.Wait() }()

	exited := exec.Command("sh", "-c", "exit 7")
	if err := exited.Start(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if alive(exited.Process.Pid) {
			return fmt.Errorf("process %d still runs", exited.Process.Pid)
		}
		return nil
	})

	stdio := exec.Command("cat")
	in, err := stdio.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := stdio.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := stdio.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = stdio.Wait() }()

	// Pipes as the MCP client makes them (an io.Pipe as stdin would keep
	// the tree's Wait copying from it).
	treeIn, treeInW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	treeOutR, treeOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	server, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c", `setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; exec cat`},
		Stdin: treeIn, Stdout: treeOut, Label: "stdio server"})
	treeIn.Close()
	treeOut.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer treeOutR.Close()
	defer treeInW.Close()
	defer func() {
		if err := server.Kill(); err != nil {
			t.Error(err)
		}
	}()
	serverOut := bufio.NewReader(treeOutR)
	serverPids := pidsFrom(t, serverOut, 1)

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	escape, err := s.Start(proctree.Command{Path: "sh", Args: []string{"sh", "-c",
		escape("sleep")}, Stdout: pw, Label: "escape"})
	pw.Close() // the tree has its own
	escapees := pidsUntilEOF(t, pr, killAll)
	defer killAll(escapees)
	if err == nil {
		<-escape.Done()
	} else {
		t.Logf("start: %v", err) // killed before it said it started: nothing may be left either
	}
	waitGone(t, escapees...)

	mustAlive(t, "a child started outside any tree", plain.Process.Pid)
	mustAlive(t, "another tree's setsid child", serverPids...)
	mustAlive(t, "another tree's main process", server.Pid())
	echo := func(what string, w io.Writer, r *bufio.Reader) {
		t.Helper()
		if _, err := io.WriteString(w, "ping\n"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		line := make(chan string, 1)
		go func() { l, _ := r.ReadString('\n'); line <- l }()
		select {
		case l := <-line:
			if l != "ping\n" {
				t.Fatalf("%s answered %q", what, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s does not answer", what)
		}
	}
	echo("a stdio child outside any tree", in, bufio.NewReader(out))
	echo("a stdio server in a tree", treeInW, serverOut)
	err = exited.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("the status of a child that had exited: %v", err)
	}
}

// A process whose first Starter made it a subreaper (as a worker's does)
// kills what a tree left when its command killed its reaper, with no
// marker to find it by, and runs on.
func TestOwnerProcessKillsOrphans(t *testing.T) {
	cmd, pids := owner(t, proctree.CgroupOff, t.TempDir(), escape("sleep"), 1)
	t.Cleanup(func() { killAll(pids) })
	waitGone(t, pids...)
	mustAlive(t, "the owner", cmd.Process.Pid)
}

// A Stdin that is not a file is delivered, and a reader that never
// returns keeps neither the tree's end nor its Kill waiting.
func TestStdinReader(t *testing.T) {
	s, err := proctree.New(proctree.Config{Cgroups: proctree.CgroupOff, KillTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tree, err := s.Start(proctree.Command{Path: "cat", Stdin: strings.NewReader("hello\n"), Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tree.Wait(); err != nil || st.ExitCode != 0 || out.String() != "hello\n" {
		t.Fatalf("cat of a reader: %+v, %v, %q", st, err, out.String())
	}

	blocked, w := io.Pipe()
	defer w.Close()
	tree, err = s.Start(proctree.Command{Path: "cat", Stdin: blocked})
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.Kill(); err != nil {
		t.Fatalf("kill of a tree whose stdin reader blocks: %v", err)
	}
	if st, err := tree.Wait(); err != nil || st.Signal != syscall.SIGKILL {
		t.Fatalf("after Kill: %+v, %v", st, err)
	}
}
