package tools

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jetloop/jetloop/proctree"
	"github.com/jetloop/jetloop/streams"
)

// Defaults of the built-in tools.
const (
	DefaultShellTimeout   = 10 * time.Minute
	DefaultShellGrace     = 2 * time.Second
	DefaultShellMaxOutput = 1 << 20
	DefaultHTTPTimeout    = 30 * time.Second
	DefaultHTTPMaxBody    = 1 << 20
	// DefaultBlobReadLimit is read_blob's largest page: below
	// DefaultBlobThreshold, so a page is never offloaded again.
	DefaultBlobReadLimit = 12 << 10
)

// BuiltinConfig configures the built-in tools. The zero value is usable;
// read_blob then answers that no blob store is configured.
type BuiltinConfig struct {
	// Blobs is the jl_blobs object store read_blob reads.
	Blobs BlobStore
	// Names parses blob names (default streams.Default()).
	Names streams.Names
	// Events reads the JL_IN events read_event reads (Events(js, in));
	// nil: read_event answers that no event store is configured.
	Events EventStore
	// EventHorizon is how many consumed events a session keeps in JL_IN
	// (worker.Config.EventHorizon), which read_event names when an event
	// is past it; 0: not named.
	EventHorizon int
	// Sessions is the jl_sessions bucket: notes_read and notes_write keep
	// the notes there, and read_blob reads transcript entries (the handles
	// of masked results) from it.
	Sessions NotesStore

	// ShellTimeout bounds one shell call (default DefaultShellTimeout).
	ShellTimeout time.Duration
	// ShellGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL (default DefaultShellGrace).
	ShellGrace time.Duration
	// ShellMaxOutput bounds the output kept of one command; the rest is
	// counted and dropped (default DefaultShellMaxOutput).
	ShellMaxOutput int
	// Shell is the shell binary (default /bin/sh).
	Shell string
	// ShellEnv is added to the command's environment ("KEY=value"). The
	// worker's own environment, which holds API keys, is not passed on:
	// the command gets PATH, HOME (its work folder), LANG, and
	// JETLOOP_AGENT, JETLOOP_SESSION and JETLOOP_CALL_ID.
	ShellEnv []string
	// Trees starts shell commands as process trees, stopped whole (see
	// package proctree); share the process's starter, whose records let
	// the next worker kill what a dead one left. Nil: the shell makes a
	// starter of its own, without records, on first use.
	Trees *proctree.Starter

	// HTTPClient makes the requests of http_get and http_request. When nil
	// a client is built that refuses every special-purpose address
	// (loopback, private, link-local, …) unless HTTPAllowPrivate is set,
	// and uses no proxy.
	HTTPClient *http.Client
	// HTTPAllowPrivate lets the built client reach loopback, private,
	// link-local (cloud metadata) and the other special-purpose addresses.
	HTTPAllowPrivate bool
	// HTTPTimeout bounds one request (default DefaultHTTPTimeout).
	HTTPTimeout time.Duration
	// HTTPMaxBody bounds the response body kept (default DefaultHTTPMaxBody).
	HTTPMaxBody int

	// BlobReadLimit is read_blob's largest page in bytes (default
	// DefaultBlobReadLimit). Keep it below the registry's BlobThreshold.
	BlobReadLimit int
}

func (c *BuiltinConfig) setDefaults() {
	if c.ShellTimeout == 0 {
		c.ShellTimeout = DefaultShellTimeout
	}
	if c.ShellGrace == 0 {
		c.ShellGrace = DefaultShellGrace
	}
	if c.ShellMaxOutput == 0 {
		c.ShellMaxOutput = DefaultShellMaxOutput
	}
	if c.Shell == "" {
		c.Shell = "/bin/sh"
	}
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = DefaultHTTPTimeout
	}
	if c.HTTPMaxBody == 0 {
		c.HTTPMaxBody = DefaultHTTPMaxBody
	}
	if c.BlobReadLimit == 0 {
		c.BlobReadLimit = DefaultBlobReadLimit
	}
}

// Validate reports settings that cannot work.
func (c BuiltinConfig) Validate() error {
	switch {
	case c.ShellTimeout < 0 || c.ShellGrace < 0 || c.HTTPTimeout < 0:
		return fmt.Errorf("tools: builtin timeouts (shell %v, grace %v, http %v): negative", c.ShellTimeout, c.ShellGrace, c.HTTPTimeout)
	case c.ShellMaxOutput < 0 || c.HTTPMaxBody < 0 || c.BlobReadLimit < 0:
		return fmt.Errorf("tools: builtin size bounds (shell output %d, http body %d, blob page %d): negative", c.ShellMaxOutput, c.HTTPMaxBody, c.BlobReadLimit)
	}
	for _, kv := range c.ShellEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("tools: shell env entry %q: want KEY=value", kv)
		}
	}
	return nil
}

// Names returns the name of every tool a worker runs, sorted: the tools
// Builtins and GitHub make. It is the one list definitions are checked
// against when they are applied, so a definition naming a tool no worker
// has is refused there; a tool a worker gains belongs in Builtins or
// GitHub, which keep this list in step (the worker's wiring is tested
// against it).
func Names() []string {
	var out []string
	for _, t := range append(Builtins(BuiltinConfig{}), GitHub(GitHubConfig{})...) {
		out = append(out, t.Spec().Name)
	}
	slices.Sort(out)
	return out
}

// Builtins returns the built-in tools: shell, http_get, http_request,
// ask_human, delegate, read_blob, read_event, notes_read and notes_write. Invalid
// settings (see Validate) are replaced by defaults; call Validate first to
// refuse them instead.
func Builtins(cfg BuiltinConfig) []Tool {
	if cfg.Validate() != nil {
		cfg = BuiltinConfig{Blobs: cfg.Blobs, Names: cfg.Names, Events: cfg.Events, EventHorizon: cfg.EventHorizon, Sessions: cfg.Sessions, HTTPClient: cfg.HTTPClient, HTTPAllowPrivate: cfg.HTTPAllowPrivate, Trees: cfg.Trees}
	}
	cfg.setDefaults()
	client := cfg.HTTPClient
	if client == nil {
		client = newHTTPClient(cfg.HTTPAllowPrivate)
	}
	return []Tool{
		&shell{cfg: cfg},
		&httpTool{get: true, client: client, timeout: cfg.HTTPTimeout, maxBody: cfg.HTTPMaxBody},
		&httpTool{client: client, timeout: cfg.HTTPTimeout, maxBody: cfg.HTTPMaxBody},
		askHuman{},
		delegate{},
		&readBlob{blobs: cfg.Blobs, sessions: cfg.Sessions, names: cfg.Names, limit: cfg.BlobReadLimit},
		&readEvent{events: cfg.Events, names: cfg.Names, limit: cfg.BlobReadLimit, horizon: cfg.EventHorizon},
		&notesRead{kv: cfg.Sessions, names: cfg.Names},
		&notesWrite{kv: cfg.Sessions, names: cfg.Names},
	}
}
