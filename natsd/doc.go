// Package natsd runs an embedded NATS server with JetStream for jetloop.
//
// It owns the server's lifecycle: the file store in a given folder and the
// lock that keeps a second process off it, the loopback client listener
// (a random port when asked for port 0), the server name, optional cluster
// routes, the JetStream sync policy, and a clean shutdown. `jetloop dev`
// runs one; tests run one or a cluster through internal/natstest.
//
// It does not create streams or buckets (package streams does) and it holds
// no application state: everything it keeps lives in the JetStream store.
package natsd
