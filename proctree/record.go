//go:build linux

package proctree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Sweep kills what the trees of dead processes left running: every tree
// recorded in the starter's Dir whose owner is no longer running (its
// cgroup killed, its reaper told to kill and then killed, and every
// process carrying its marker killed), and every tree cgroup under the
// starter's cgroup parent whose owner is gone. Trees of running
// processes, this one included, are left alone. Call it when a process
// starts, before it recovers what the dead one was doing: a call is not
// settled as interrupted while its processes still run.
func (s *Starter) Sweep(ctx context.Context) ([]Swept, error) {
	var out []Swept
	var errs []error
	if s.cfg.Dir != "" {
		ents, err := os.ReadDir(s.cfg.Dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("proctree: read records %s: %w", s.cfg.Dir, err)
		}
		for _, e := range ents {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			path := filepath.Join(s.cfg.Dir, e.Name())
			if strings.HasSuffix(e.Name(), ".tmp") {
				if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
					_ = os.Remove(path)
				}
				continue
			}
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			r, err := ReadRecord(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile by its owner
			}
			if err != nil {
				// Written whole or not at all (a rename): this one names
				// nothing that can be found.
				_ = os.Remove(path)
				out = append(out, Swept{Label: "unreadable record " + e.Name() + ": " + err.Error()})
				continue
			}
			if r.Owner == s.self || r.Owner.Alive() {
				continue
			}
			sw, err := s.sweepRecord(r)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			_ = os.Remove(path)
			out = append(out, sw)
		}
	}
	if s.cgParent != "" {
		ents, err := os.ReadDir(s.cgParent)
		if err != nil {
			errs = append(errs, fmt.Errorf("proctree: read cgroups %s: %w", s.cgParent, err))
		}
		for _, e := range ents {
			owner, ok := cgroupOwner(e.Name())
			if !ok || !e.IsDir() || owner == s.self || owner.Alive() {
				continue
			}
			path := filepath.Join(s.cgParent, e.Name())
			if err := killCgroup(path, s.cfg.KillTimeout); err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, Swept{Label: "cgroup " + e.Name(), Owner: owner, Cgroup: path})
		}
	}
	return out, errors.Join(errs...)
}

func (s *Starter) sweepRecord(r Record) (Swept, error) {
	sw := Swept{Label: r.Label, Owner: r.Owner}
	if r.Cgroup != "" {
		if err := killCgroup(r.Cgroup, s.cfg.KillTimeout); err != nil {
			return sw, err
		}
		sw.Cgroup = r.Cgroup
	}
	if r.Reaper.Alive() {
		// It kills its tree when its parent dies; this one outlived it.
		_ = r.Reaper.signal(unix.SIGUSR1)
		deadline := time.Now().Add(s.cfg.KillTimeout)
		for r.Reaper.Alive() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // another process's exit cannot be awaited
		}
		if r.Reaper.Alive() {
			_ = r.Reaper.signal(unix.SIGKILL)
			sw.Killed++
		}
	}
	if r.Main.Alive() {
		_ = r.Main.signal(unix.SIGKILL)
		sw.Killed++
	}
	n, err := killMarked(r.Marker, s.cfg.KillTimeout)
	sw.Killed += n
	if err != nil {
		return sw, fmt.Errorf("proctree: sweep %s: %w", r.Label, err)
	}
	return sw, nil
}

// killMarked kills every process carrying marker until none is left, at
// most timeout, and returns how many it killed.
func killMarked(marker string, timeout time.Duration) (int, error) {
	if marker == "" {
		return 0, nil
	}
	killed := map[Proc]bool{}
	deadline := time.Now().Add(timeout)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		ps, err := withMarker(marker)
		if err != nil {
			return len(killed), err
		}
		if len(ps) == 0 {
			return len(killed), nil
		}
		for _, p := range ps {
			if err := p.signal(unix.SIGKILL); err == nil {
				killed[p] = true
			}
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("proctree: %d processes with marker %s still running after %s", len(ps), marker, timeout)
		}
		time.Sleep(pause) // the killed are reaped by their parents
	}
}
