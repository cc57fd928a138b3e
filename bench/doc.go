// Package bench measures jetloop against the raw JetStream operations it
// stands on, in one run, and is what `jetloop bench` prints:
//
//   - ingest: signed GitHub webhooks through the HTTP receiver, dedupe,
//     admission and publish, against the operations each needs at least
//     (a jl_dedupe create and a publish of the same size), at the same
//     concurrency, with the process's CPU and the JetStream messages
//     each way takes. The webhooks come from a minimal HTTP/1.1 writer
//     (internal/loadgen) on one keep-alive connection a worker, in this
//     process and on its cores; what it costs is measured beside, as the
//     CPU of the same requests to a handler that answers 202 at once
//     (and the same from net/http's client);
//   - ingest-r3: the same on a three-node cluster, streams replicated
//     three times;
//   - step: durable steps (a scripted model calling a no-op, replay-safe
//     tool) of one session and of eight at once on one worker, against
//     what the best possible implementation needs for as many (per step
//     one KV create of the size of the step's entries and one
//     compare-and-set of the size of its state), p50 and p99 beside
//     steps/s, and the messages JetStream stored a step (in every stream,
//     and in jl_sessions) beside the raw pair's two;
//   - step-r3: the same on a three-node cluster, streams replicated three
//     times;
//   - control: publish to effect of a steer (seen by the next model call)
//     and of a cancel (a sleeping shell stopped, the session cancelled),
//     against a raw publish to consume on JL_CTL, as p50 and p99;
//   - recovery: from kill -9 of a worker process in the middle of a step
//     to the session done on a standby worker process;
//   - idle: the heap a worker holds for 10,000 sessions at rest.
//
// Each runs against an embedded single-node server (ingest-r3 and
// step-r3: a cluster of three on loopback) in a temporary folder, once
// per JetStream sync_interval asked for (the server's default of two
// minutes, and "always", which fsyncs every write before acknowledging
// it). Ingest and step report, as the figure "replicas", the nodes the
// streams both ways write to were stored on (1, or 3 on the cluster).
// The client is connected to one node, picked at random from the
// cluster's addresses, which may or may not lead those streams: both
// ways share the connection, so both take the same path. Figures are
// ratios and percentiles of one run on one machine: they compare, they
// do not promise.
//
// The package owns the measurements and their report; the command line
// that runs them is cli's. It does not assert anything: tests do that.
package bench
