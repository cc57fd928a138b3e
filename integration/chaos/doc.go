// Package chaos is jetloop's chaos harness: a 3-node NATS cluster and
// several ingest, worker and cron processes on loopback, each a process of
// its own, under a workload of signed GitHub webhooks, user requests with
// Idempotency-Keys (a quarter of them to a lead agent that delegates each
// to two helpers at once; bursts of them, 250 ms apart, to an agent that
// debounces them; more of them than it may run at once to an agent with a
// concurrency limit of two), control messages and schedule ticks against
// scripted agents whose replay-unsafe shell tool appends to a ledger,
// while faults hit random processes every few seconds: kill -9 (then a
// restart) and SIGSTOP/SIGCONT, NATS nodes included.
//
// When the workload and the faults stop and the system has had a quiet
// period, a checker reads every session back and proves, printing counts:
//
//   - every event answered 2xx was processed: it is an event or user entry
//     of its session's transcript, exactly once;
//   - no replay-unsafe tool ran twice: the ledger's lines are unique;
//   - every control message answered 2xx was applied once;
//   - every session ended final or waiting (no run in progress, no step in
//     flight);
//   - no transcript has a tool call without exactly one result;
//   - every delegated session (the lead agent delegates each request to
//     two helpers at once) started once, its parent recorded the call as
//     delegated to it, and every delegate call has exactly one result; no
//     session is left waiting for a child;
//   - every debounced burst ran once: each burst session's event entries
//     stand for bursts whose latest events were sent and appear once, and
//     their counts add up to the requests answered 2xx (plus at most those
//     never answered 2xx, which a fault may have stored);
//   - the concurrency-limited agent never ran more than its limit at
//     once: its tool calls note when they began and ended, and no more
//     than two overlap (a call cut by a fault is left out: its worker lost
//     the session, and its slot, while it may have gone on).
//
// A violation fails the test and prints the session.
//
// The short run (TestChaosShort, about a minute of faults) runs in CI:
//
//	go test ./integration/chaos -run TestChaosShort -v
//
// The long run is TestChaos with a duration:
//
//	go test ./integration/chaos -run TestChaos -chaos.duration=10m -timeout 60m -v
//
// Flags: -chaos.duration (the long run's workload), -chaos.sync (the
// nodes' JetStream sync_interval: "always" or a duration; empty: the
// server's default), -chaos.seed (the faults and workload; 0 picks one and
// prints it), -chaos.workers, -chaos.ingests, -chaos.crons, and
// -chaos.keep (keep the run's folder with every process's log).
//
// The package holds tests only; chaosnode is the NATS node command the
// harness builds.
package chaos
