//go:build linux

package proctree

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroupPrefix starts the name of every tree's cgroup:
// jetloop-tree-<owner pid>-<owner start>-<n>, so that a later process can
// tell whose it was.
const cgroupPrefix = "jetloop-tree-"

// findCgroupParent returns the cgroup v2 directory this process can make
// tree cgroups in: its own cgroup on the cgroup2 mount, if a child made
// there has cgroup.kill (Linux 5.14+) and can be removed again. "" and the
// reason when there is none (no cgroup2 mount, a read-only one, an older
// kernel, no permission).
func findCgroupParent() (string, error) {
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	own, err := ownCgroup()
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(own, root)
	if !ok {
		return "", fmt.Errorf("proctree: own cgroup %s is outside the cgroup2 mount's root %s", own, root)
	}
	parent := filepath.Join(mount, rel)
	probe := filepath.Join(parent, fmt.Sprintf("%sprobe-%d", cgroupPrefix, os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("proctree: make a cgroup under %s: %w", parent, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return "", fmt.Errorf("proctree: cgroup.kill under %s: %w", parent, err)
	}
	if err := os.Remove(probe); err != nil {
		return "", fmt.Errorf("proctree: remove a cgroup under %s: %w", parent, err)
	}
	return parent, nil
}

// cgroup2Mount finds the cgroup2 mount in /proc/self/mountinfo: its mount
// point and the cgroup path it shows at that point.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("proctree: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, rest := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 6 || len(rest) < 1 || rest[0] != "cgroup2" {
			continue
		}
		if opts := strings.Split(fields[5], ","); opts[0] == "ro" {
			return "", "", fmt.Errorf("proctree: cgroup2 at %s is read-only", fields[4])
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("proctree: read mountinfo: %w", err)
	}
	return "", "", errors.New("proctree: no cgroup2 mount")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup is this process's cgroup v2 path ("0::<path>" in
// /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("proctree: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if strings.HasSuffix(p, " (deleted)") {
				return "", fmt.Errorf("proctree: own cgroup %s was removed", p)
			}
			return p, nil
		}
	}
	return "", errors.New("proctree: not in a cgroup v2 hierarchy")
}

// killCgroup kills every process in the cgroup at path at once
// (cgroup.kill, which no fork escapes), waits until it is empty and
// removes it. A cgroup that is gone already is not an error.
func killCgroup(path string, timeout time.Duration) error {
	err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("proctree: kill cgroup %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		ev, err := os.ReadFile(filepath.Join(path, "cgroup.events"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && bytes.Contains(ev, []byte("populated 0")) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proctree: cgroup %s still populated %s after its kill", path, timeout)
		}
		time.Sleep(pause) // the kernel says nothing when the last process is gone but through this file
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("proctree: remove cgroup %s: %w", path, err)
	}
	return nil
}

// cgroupOwner parses the owner out of a tree cgroup's name.
func cgroupOwner(name string) (Proc, bool) {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return Proc{}, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 3 {
		return Proc{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Proc{}, false
	}
	return Proc{Pid: pid, Start: start}, true
}
