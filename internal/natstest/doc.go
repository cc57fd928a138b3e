// Package natstest starts real embedded NATS servers for tests: one node,
// or a cluster, on random loopback ports with stores in t.TempDir(), ready
// (JetStream meta leader elected) before the helper returns, and shut down
// by t.Cleanup. There is no mocked NATS anywhere in jetloop's tests.
package natstest
