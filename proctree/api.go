package proctree

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MarkerEnv is set in the environment of every process of a tree to the
// tree's marker, so that what a tree started can be found (and killed)
// even when its reaper is gone.
const MarkerEnv = "JETLOOP_PROCESS_TREE"

// reaperEnv carries a reaper's settings from the process that starts it;
// a process started with it set runs as a reaper (see init).
const reaperEnv = "_JETLOOP_PROCTREE_REAPER"

// Defaults of Config.
const (
	DefaultKillTimeout  = 10 * time.Second
	DefaultStartTimeout = 10 * time.Second
)

// CgroupMode says whether trees get a cgroup of their own.
type CgroupMode string

// Cgroup modes.
const (
	// CgroupAuto gives every tree a cgroup v2 with cgroup.kill where the
	// process may make one, and none elsewhere.
	CgroupAuto CgroupMode = ""
	// CgroupOff never makes cgroups: the reaper alone finds the tree.
	CgroupOff CgroupMode = "off"
)

// Config configures a Starter.
type Config struct {
	// Dir keeps a record of every running tree, so that Sweep in a later
	// process can kill what this one left if it died with its reapers
	// (kill -9 of the whole process group, the OOM killer). Empty: no
	// records; trees still die with their reaper when this process dies,
	// and Sweep still removes dead processes' cgroups.
	Dir string
	// Cgroups says whether trees get a cgroup. Default CgroupAuto.
	Cgroups CgroupMode
	// KillTimeout bounds how long Kill waits for a tree to be gone.
	// Default 10 s.
	KillTimeout time.Duration
	// StartTimeout bounds how long Start waits for the reaper to start
	// the command; past it the reaper is killed and Start fails with
	// ErrReaperKilled (the command may have started). Default 10 s.
	StartTimeout time.Duration
	Log          *slog.Logger
}

func (c *Config) setDefaults() {
	if c.KillTimeout == 0 {
		c.KillTimeout = DefaultKillTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	switch {
	case c.KillTimeout < 0 || c.StartTimeout < 0:
		return errors.New("proctree: negative timeout")
	case c.Cgroups != CgroupAuto && c.Cgroups != CgroupOff:
		return fmt.Errorf("proctree: cgroup mode %q: want %q or %q", c.Cgroups, CgroupAuto, CgroupOff)
	}
	return nil
}

// ErrReaperKilled is what Start returns (wrapped) when the tree's reaper
// was killed before it reported the start of its command: by the
// command itself most likely, or by Start when the report did not come
// within StartTimeout. The command may have run, and had its effects,
// although Start fails; nothing of it is left running.
var ErrReaperKilled = errors.New("the reaper was killed before it reported the start; the command may have run, and nothing of it is left")

// Command is what a tree runs: its main process's program, arguments,
// environment, folder and standard streams. An io.Reader or io.Writer
// that is not an *os.File is copied by goroutines, as os/exec does (on
// Linux, by goroutines of the tree's own, see Stdin and Stdout).
type Command struct {
	// Path is the program; a name without a slash is looked up in PATH.
	Path string
	// Args are the arguments, Args[0] included.
	Args []string
	// Env is the environment; nil is this process's.
	Env []string
	// Dir is the working folder; empty is this process's.
	Dir string
	// Stdin, if it is not an *os.File, is read until it ends. On Linux a
	// read that blocks past the tree's end does not keep the tree from
	// ending; it is still made, after Wait, and what it returns is
	// dropped: pass a reader nothing else reads from.
	Stdin io.Reader
	// Stdout and Stderr, if they are not *os.File, are written until the
	// tree's output ends (one pipe for both if they are the same). On
	// Linux the tree ends (Wait returns) once they are written no more,
	// and a Start that fails returns once they are written no more too: a
	// process outside the tree that holds the output open is waited for
	// a second at most, and a Write that blocks (until its reader reads,
	// after Start returns, say) another second, after which that Write,
	// still made, is the last.
	Stdout io.Writer
	Stderr io.Writer
	// Label names the tree in records and logs (agent, session, call).
	Label string
}

// Status is how a tree's main process ended.
type Status struct {
	// ExitCode is the exit code, or -1 when a signal ended it.
	ExitCode int
	// Signal is the signal that ended it, if any.
	Signal syscall.Signal
}

// Proc names one process as it can be told apart from a later process
// with the same pid: its pid and its start time (clock ticks since boot,
// field 22 of /proc/<pid>/stat).
type Proc struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// String is "pid@start".
func (p Proc) String() string { return strconv.Itoa(p.Pid) + "@" + strconv.FormatUint(p.Start, 10) }

// Record is what a starter keeps of a running tree in its Dir, so that a
// later process can kill the tree if its owner died with its reaper.
type Record struct {
	// Owner is the process that started the tree.
	Owner Proc `json:"owner"`
	// Reaper and Main are the tree's reaper and main process.
	Reaper Proc `json:"reaper"`
	Main   Proc `json:"main"`
	// Marker is MarkerEnv's value in the tree's processes.
	Marker string `json:"marker"`
	// Cgroup is the tree's cgroup, if it has one.
	Cgroup  string    `json:"cgroup,omitempty"`
	Label   string    `json:"label,omitempty"`
	Started time.Time `json:"started"`
}

// ReadRecord reads the record at path.
func ReadRecord(path string) (Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Record{}, fmt.Errorf("proctree: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("proctree: record %s: %w", path, err)
	}
	return r, nil
}

func writeRecord(path string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("proctree: write record %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("proctree: write record %s: %w", path, err)
	}
	return nil
}

// Swept is one tree a dead process left, and what Sweep did about it.
type Swept struct {
	// Label names the tree; Owner is the dead process that started it.
	Label string
	Owner Proc
	// Killed counts the processes killed (by pid; a cgroup's are not
	// counted one by one).
	Killed int
	// Cgroup is the tree's cgroup, removed.
	Cgroup string
}

// withoutMarker drops a marker inherited from a tree this process runs
// in: every tree has its own.
func withoutMarker(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if !strings.HasPrefix(kv, MarkerEnv+"=") && !strings.HasPrefix(kv, reaperEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}
