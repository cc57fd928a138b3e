// Package cli is jetloop's command line: the verbs, their flags and their
// output (human tables, or --json for machines). It wires packages into
// processes (`jetloop dev` runs an embedded server and every component;
// `jetloop ingest|worker|cron` run one component against a NATS URL) and
// holds no logic of its own beyond that wiring. cmd/ mains call Main.
package cli
