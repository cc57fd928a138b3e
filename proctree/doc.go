// Package proctree runs a command as a process tree that can be stopped
// whole: everything the command starts, also what calls setsid or forks
// twice to leave its process group, dies on Kill, when the command exits,
// and when the process that started it dies, even by kill -9.
//
// Each tree runs under a reaper: this executable started again (see the
// package's init), which makes itself a child subreaper, so that every
// orphan of the tree is reparented to it, and which is started with a
// parent-death signal. It starts the command, passes SIGTERM to every
// process of the tree, kills them all on SIGUSR1 or its parent's death,
// and once the command exits kills what it left, reaps everything and
// reports the command's status. Where the process may make cgroup v2
// directories with cgroup.kill (Linux 5.14+), the command runs in a
// cgroup of its own, killed at once, which no fork escapes. Every
// process of a tree carries MarkerEnv in its environment.
//
// For the case where the reaper dies too (kill -9 of a whole process
// group, the OOM killer), a Starter with a Dir keeps a record of each
// running tree, and Sweep in the next process kills what dead owners
// left: by cgroup, by reaper, by marker, each checked against pid reuse
// by the process's start time.
//
// It does not decide when to stop a tree (the tool that runs it does) or
// confine what a tree may do: it is no sandbox.
package proctree
