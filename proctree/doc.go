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
// The process that starts trees (their owner) is a child subreaper as
// well, from its first Starter on: a command can kill its own reaper (it
// runs as the same user), and what it left is then reparented to the
// owner rather than to init, whatever it did to its session, process
// group, environment or arguments. While the owner runs, nothing a tree
// starts leaves the owner's subtree. The owner tells the children it
// started (reapers, or any other subprocess) from such orphans by the
// pidfd Go's os package holds of each child it starts until Wait; when a
// reaper ends without a status it kills every orphan with everything
// under it, and it reaps orphans by pidfd, never with a wait for any
// child, so that no status os/exec waits for is taken. Where pidfds do
// not work (Linux before 5.4, a seccomp filter) the owner is no
// subreaper (Starter.Orphans says why).
//
// For the case where the reaper dies too (kill -9 of a whole process
// group, the OOM killer), a Starter with a Dir keeps a record of each
// running tree, and Sweep in the next process kills what dead owners
// left: by cgroup, by reaper, by marker, each checked against pid reuse
// by the process's start time.
//
// What holds, by mode:
//
//   - With a cgroup: every process of the tree, wherever it went, dies on
//     Kill, when the command exits, when the reaper or the owner dies, and
//     at the latest at the next Sweep, which kills the cgroups of dead
//     owners.
//   - Reaper only, owner running: the same, through the reaper, or through
//     the owner when the reaper was killed.
//   - Reaper only, owner killed: the reaper's parent-death signal kills
//     the tree. If the reaper died first, or with the owner (a command
//     that kills its reaper and then the owner, the OOM killer), before
//     the owner killed the orphans, those reparented beyond it (to init
//     or an outer subreaper) are out of reach of this package: Sweep finds
//     them by marker only, so one that also dropped MarkerEnv from its
//     environment runs on. Only a boundary around the owner ends it then:
//     a cgroup v2 for the trees, a service manager's cgroup around the
//     owner (systemd stops a unit's whole cgroup), or a container's pid
//     namespace.
//
// Outside Linux (macOS, the BSDs) a tree is only its command's process
// group: Kill and the command's exit kill the group, what leaves it
// escapes, nothing dies with the owner, and Sweep finds nothing.
//
// It does not decide when to stop a tree (the tool that runs it does) or
// confine what a tree may do: it is no sandbox.
package proctree
