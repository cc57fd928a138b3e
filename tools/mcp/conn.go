package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/policies"
)

// conn is one session's connection to one server. It connects lazily,
// notices when the server went away (the SDK session ends) and connects
// again, with exponential backoff and full jitter, at the next call.
type conn struct {
	p       *Pool
	key     connKey
	srv     policies.MCPServer
	workDir string
	log     *slog.Logger

	// sem serialises connecting and closing (a channel so a wait can end
	// with the call's context).
	sem chan struct{}
	// Under sem:
	cs     *sdk.ClientSession
	watch  *cancelWatch  // of cs
	proc   *process      // of a stdio server
	ended  chan struct{} // closed when cs ended
	fails  int           // connects failed in a row
	closed bool
	// generation counts connections made, for logs and tests.
	generation int

	// refreshing is set while a refresh after tools/list_changed runs;
	// relistAgain when another arrived since it began.
	refreshing, relistAgain atomic.Bool

	liveMu  sync.Mutex
	liveGen int                 // the generation live is of
	live    map[string]liveTool // the current connection's tools/list
	noted   map[string]bool     // changes recorded for this connection
	listErr error               // the last tools/list failed
}

// liveTool is what a server says of a tool now.
type liveTool struct {
	description string
	schema      string // compact, keys sorted
}

func newConn(p *Pool, k connKey, s policies.MCPServer, workDir string) *conn {
	return &conn{
		p: p, key: k, srv: s, workDir: workDir,
		log: p.opts.Logger.With("agent", k.agent, "session", k.session, "mcp_server", s.Name),
		sem: make(chan struct{}, 1),
	}
}

func (c *conn) lock(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *conn) unlock() { <-c.sem }

// errClosed is a call on a connection its session closed.
var errClosed = errors.New("mcp: connection closed with its session")

// session returns the live SDK session, and the watch of its
// cancellations, connecting when there is none or the last one ended. It
// tries up to MaxAttempts connects, each after a jittered backoff, and
// stops at once when ctx ends.
func (c *conn) session(ctx context.Context) (*sdk.ClientSession, *cancelWatch, error) {
	if err := c.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer c.unlock()
	if c.closed {
		return nil, nil, errClosed
	}
	if c.cs != nil {
		if why := c.gone(ctx); why == "" {
			c.relist(ctx)
			return c.cs, c.watch, nil
		} else if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		} else {
			c.log.Info("MCP server connection is gone; reconnecting", "generation", c.generation, "why", why)
			c.p.metrics.reconnects.WithLabelValues(c.srv.Name).Inc()
			c.drop()
		}
	}
	var last error
	for attempt := 0; attempt < c.p.opts.MaxAttempts; attempt++ {
		if c.fails > 0 {
			if err := sleep(ctx, c.backoff()); err != nil {
				return nil, nil, err
			}
		}
		if g := c.p.gate(address(c.srv)); g != nil {
			if err := g.Wait(ctx); err != nil {
				return nil, nil, ctxErr(ctx, err)
			}
		}
		start := time.Now()
		err := c.dial(ctx)
		c.p.metrics.connectSeconds.WithLabelValues(c.srv.Name).Observe(time.Since(start).Seconds())
		if err == nil {
			c.fails = 0
			return c.cs, c.watch, nil
		}
		if ctx.Err() != nil {
			c.p.metrics.connects.WithLabelValues(c.srv.Name, "cancelled").Inc()
			return nil, nil, ctx.Err()
		}
		c.fails++
		last = err
		c.p.metrics.connects.WithLabelValues(c.srv.Name, "failed").Inc()
		c.log.Warn("connect to MCP server failed", "attempt", attempt+1, "failures", c.fails, "err", err)
	}
	return nil, nil, fmt.Errorf("%w after %d attempts: %w", errUnreachable, c.p.opts.MaxAttempts, last)
}

var errUnreachable = errors.New("MCP server unreachable")

// backoff is the wait before the next connect: full jitter over an
// exponentially growing, capped window.
func (c *conn) backoff() time.Duration {
	return jitter(c.p.opts.BaseBackoff, c.p.opts.MaxBackoff, c.fails)
}

// jitter is a random duration in [0, min(max, base·2^n)).
func jitter(base, max time.Duration, n int) time.Duration {
	w := max
	if n < 30 && base<<n < max && base<<n > 0 {
		w = base << n
	}
	if w <= 0 {
		return 0
	}
	return rand.N(w)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// dial makes one connection: transport, initialize, tools/list, and the
// comparison of the list with the recorded catalog.
func (c *conn) dial(ctx context.Context) error {
	watch := newCancelWatch()
	cs, proc, err := connect(ctx, c.p, c.srv, c.workDir, c.key.agent, c.key.session, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.listChanged() },
	}, watch)
	if err != nil {
		return err
	}
	live, err := listTools(ctx, cs)
	if err != nil {
		_ = cs.Close()
		return fmt.Errorf("tools/list: %w", err)
	}
	c.generation++
	c.cs, c.proc, c.watch = cs, proc, watch
	c.ended = make(chan struct{})
	ended := c.ended
	go func() {
		_ = cs.Wait()
		close(ended)
	}()
	c.p.metrics.connects.WithLabelValues(c.srv.Name, "ok").Inc()
	c.p.metrics.open.Inc()
	c.log.Info("connected to MCP server", "generation", c.generation, "mcp_session", cs.ID(), "tools", len(live))
	c.setLive(live, "connect", c.generation)
	return nil
}

// pingTimeout bounds the liveness check of an HTTP connection.
const pingTimeout = 5 * time.Second

// gone says why the current session cannot carry a call, or "": its
// connection ended, its stdio server exited, or its HTTP server no longer
// answers for the session (it restarted). The HTTP check is a ping: it
// costs a round trip per call, and makes a restart between two calls a
// reconnect instead of a call sent into a dead connection, whose fate
// would be unknown. A first ping that fails on the transport is tried
// once more, as a kept-alive TCP connection the server closed is only
// found out by using it.
func (c *conn) gone(ctx context.Context) string {
	select {
	case <-c.ended:
		return fmt.Sprintf("connection ended (%v)", c.cs.Wait())
	default:
	}
	if c.proc != nil {
		if !c.proc.running() {
			return "the server process exited"
		}
		return ""
	}
	var err error
	for range 2 {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err = c.cs.Ping(pctx, nil)
		cancel()
		var rpc *jsonrpc.Error
		switch {
		case err == nil:
			return ""
		case ctx.Err() != nil:
			return "cancelled"
		case errors.Is(err, sdk.ErrSessionMissing), errors.Is(err, sdk.ErrConnectionClosed):
			return fmt.Sprintf("ping: %v", err)
		case errors.As(err, &rpc) && rpc.Code != codeRejected:
			return "" // it answered, if only to refuse the ping
		}
	}
	return fmt.Sprintf("ping: %v", err)
}

// codeRejected is the code of the SDK's errors for a request its
// transport could not deliver or that came back with an HTTP error.
const codeRejected = -32005

// drop forgets the current SDK session (under sem).
func (c *conn) drop() {
	if c.cs == nil {
		return
	}
	_ = c.cs.Close()
	c.cs, c.proc, c.watch = nil, nil, nil
	c.p.metrics.open.Dec()
}

// broken marks the current session unusable, so the next call connects
// again.
func (c *conn) broken(cs *sdk.ClientSession) {
	if err := c.lock(context.Background()); err != nil {
		return
	}
	defer c.unlock()
	if c.cs == cs {
		c.drop()
	}
}

// close ends the connection for good; a stdio server is stopped. The
// notifications/cancelled of calls just cancelled are written first: the
// session a cancel ends rests, and closes its connections, right away.
func (c *conn) close() {
	_ = c.lock(context.Background())
	defer c.unlock()
	c.closed = true
	if c.cs != nil {
		c.watch.wait(cancelNotifyWait, c.ended)
	}
	c.drop()
}

// cancelNotifyWait bounds how long closing a connection waits for the
// notifications/cancelled its cancelled calls owe (the SDK sends them
// after the call returned).
const cancelNotifyWait = 2 * time.Second

// cancelWatch counts the notifications/cancelled one connection owes its
// server (a call of it was cancelled) and those its transport has tried to
// write.
type cancelWatch struct {
	owed, tried atomic.Int64
	wrote       chan struct{} // a send after each try
}

func newCancelWatch() *cancelWatch { return &cancelWatch{wrote: make(chan struct{}, 1)} }

// owe counts a call cancelled on the connection.
func (w *cancelWatch) owe() {
	if w != nil {
		w.owed.Add(1)
	}
}

// triedOne counts a notifications/cancelled the transport wrote, or
// failed to.
func (w *cancelWatch) triedOne() {
	if w == nil {
		return
	}
	w.tried.Add(1)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
}

// wait returns once every owed notification was tried, the connection
// ended, or after max.
func (w *cancelWatch) wait(max time.Duration, ended <-chan struct{}) {
	if w == nil || w.tried.Load() >= w.owed.Load() {
		return
	}
	t := time.NewTimer(max)
	defer t.Stop()
	for w.tried.Load() < w.owed.Load() {
		select {
		case <-w.wrote:
		case <-ended:
			return
		case <-t.C:
			return
		}
	}
}

// isCancelNotification reports whether one JSON-RPC message, as a
// transport writes it, is notifications/cancelled.
func isCancelNotification(msg []byte) bool {
	if len(msg) > 4<<10 || !bytes.Contains(msg, []byte("notifications/cancelled")) {
		return false
	}
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(msg, &m) == nil && m.Method == "notifications/cancelled"
}

// listChanged takes a tools/list_changed: one refresh runs at a time, and
// notifications that arrive meanwhile make one more, so a server that
// floods them costs one list in flight, not a goroutine and a whole list
// each.
func (c *conn) listChanged() {
	c.relistAgain.Store(true)
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			c.relistAgain.Store(false)
			c.refresh()
			c.refreshing.Store(false)
			if !c.relistAgain.Load() || !c.refreshing.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// refresh lists the tools again after tools/list_changed.
func (c *conn) refresh() {
	if err := c.lock(context.Background()); err != nil {
		return
	}
	cs, gen := c.cs, c.generation
	c.unlock()
	if cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live, err := listTools(ctx, cs)
	if err != nil {
		c.liveMu.Lock()
		if gen == c.liveGen { // not a connection replaced meanwhile
			c.listErr = err
		}
		c.liveMu.Unlock()
		c.log.Warn("tools/list after tools/list_changed failed; the server's tools are withheld until it answers", "err", err)
		return
	}
	c.setLive(live, "list_changed", gen)
}

// relist asks the server for its tools again when the last tools/list
// (after tools/list_changed) failed, so a passing failure withholds the
// server's tools only until the next call (under sem).
func (c *conn) relist(ctx context.Context) {
	c.liveMu.Lock()
	failed := c.listErr != nil
	c.liveMu.Unlock()
	if !failed {
		return
	}
	live, err := listTools(ctx, c.cs)
	if err != nil {
		c.liveMu.Lock()
		if c.liveGen == c.generation {
			c.listErr = err
		}
		c.liveMu.Unlock()
		c.log.Warn("tools/list failed again; the server's tools stay withheld", "err", err)
		return
	}
	c.setLive(live, "list_changed", c.generation)
}

// setLive takes a new tools/list and records how each admitted tool
// differs from the catalog recorded at apply.
//
// gen is the connection generation the list is of: a list_changed answer
// of a connection replaced meanwhile is dropped.
func (c *conn) setLive(live map[string]liveTool, when string, gen int) {
	c.liveMu.Lock()
	if when != "connect" && gen != c.liveGen {
		c.liveMu.Unlock()
		return
	}
	c.live, c.listErr, c.liveGen = live, nil, gen
	if c.noted == nil || when == "connect" {
		c.noted = map[string]bool{}
	}
	var changes []Change
	for _, name := range c.srv.Tools {
		e, ok := c.srv.CatalogTool(name)
		if !ok {
			continue
		}
		kind, now := compare(e, live)
		if kind == "" {
			continue
		}
		note := name + "\x00" + kind + "\x00" + now
		if c.noted[note] {
			continue
		}
		c.noted[note] = true
		changes = append(changes, Change{
			Agent: c.key.agent, Session: c.key.session, Server: c.srv.Name, Tool: name, Mounted: c.srv.Mount(name),
			Kind: kind, Recorded: recordedOf(e, kind), Now: now, Found: when,
			Withheld: kind == ChangeRemoved || !c.srv.Follows(), Time: time.Now().UTC(),
		})
	}
	c.liveMu.Unlock()
	for _, ch := range changes {
		c.p.metrics.changes.WithLabelValues(c.srv.Name, ch.Kind).Inc()
		msg := "MCP tool changed on the server since it was applied; withheld until the agent is applied again"
		if !ch.Withheld {
			msg = "MCP tool changed on the server since it was applied; its calls still reach the server (on_change: follow), the model is shown the recorded catalog"
		}
		c.log.Warn(msg, "tool", ch.Mounted, "change", ch.Kind, "found", when)
		if c.p.opts.OnChange != nil {
			c.p.opts.OnChange(ch)
		}
	}
}

// withheld says why a tool may not be called on this connection, or "":
// changed, its change is recorded and it stays withheld until the agent is
// applied again; otherwise the server's list could not be read, and is
// asked for again at the next call.
//
// A server declared on_change: follow withholds only a tool it no longer
// offers: another description or schema is recorded (setLive) and the call
// goes on, and so does a call while the list cannot be read (a tool that
// is gone is then refused by the server itself).
func (c *conn) withheld(e policies.MCPTool) (why string, changed bool) {
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	follow := c.srv.Follows()
	if c.listErr != nil {
		if follow {
			return "", false
		}
		return fmt.Sprintf("the server's tool list could not be read after it changed (%v)", c.listErr), false
	}
	kind, _ := compare(e, c.live)
	switch {
	case kind == "":
		return "", false
	case kind == ChangeRemoved:
		return "the server no longer offers it", true
	case follow:
		return "", false
	default:
		return fmt.Sprintf("its %s on the server differs from the one recorded when the agent was applied", kind), true
	}
}

// compare says how the live list differs from a recorded entry: "" when
// it does not.
func compare(e policies.MCPTool, live map[string]liveTool) (kind, now string) {
	l, ok := live[e.Name]
	switch {
	case !ok:
		return ChangeRemoved, ""
	case l.description != e.Description:
		return ChangeDescription, l.description
	case l.schema != string(e.Schema):
		return ChangeSchema, l.schema
	}
	return "", ""
}

func recordedOf(e policies.MCPTool, kind string) string {
	switch kind {
	case ChangeDescription:
		return e.Description
	case ChangeSchema:
		return string(e.Schema)
	}
	return ""
}

// listTools reads a server's whole tool list, bounded: at most
// maxListedTools tools in at most as many pages, of at most maxListBytes
// of names, descriptions and schemas in all (each page is one message,
// bounded by Options.MaxMessage; the bound in all keeps a server that
// pages megabytes of tools no definition admits out of the worker's
// memory).
func listTools(ctx context.Context, cs *sdk.ClientSession) (map[string]liveTool, error) {
	out := map[string]liveTool{}
	size := 0
	params := &sdk.ListToolsParams{}
	for pages := 0; ; pages++ {
		if pages >= maxListedTools {
			return nil, fmt.Errorf("the server's tool list runs over more than %d pages", maxListedTools)
		}
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if len(out) >= maxListedTools {
				return nil, fmt.Errorf("the server lists more than %d tools", maxListedTools)
			}
			schema, err := canonical(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
			}
			if size += len(t.Name) + len(t.Description) + len(schema); size > maxListBytes {
				return nil, fmt.Errorf("the server's tool list is larger than %d bytes", maxListBytes)
			}
			out[t.Name] = liveTool{description: t.Description, schema: schema}
		}
		if res.NextCursor == "" {
			return out, nil
		}
		params = &sdk.ListToolsParams{Cursor: res.NextCursor}
	}
}

// canonical is v as compact JSON with sorted keys: two schemas that mean
// the same compare equal however a server spelled them.
func canonical(v any) (string, error) {
	if raw, ok := v.(json.RawMessage); ok {
		var x any
		if err := json.Unmarshal(raw, &x); err != nil {
			return "", err
		}
		v = x
	}
	if v == nil {
		v = map[string]any{"type": "object"}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return "", err
	}
	b, err = json.Marshal(x)
	return string(b), err
}

// connect opens an SDK session to a server, outside any pool's
// bookkeeping (apply's admission uses it too).
func connect(ctx context.Context, p *Pool, s policies.MCPServer, workDir, agent, session string, copts *sdk.ClientOptions, watch *cancelWatch) (*sdk.ClientSession, *process, error) {
	if copts == nil {
		copts = &sdk.ClientOptions{}
	}
	copts.Logger = slog.New(slog.DiscardHandler)
	// No roots, sampling or elicitation: the server gets tool calls only.
	copts.Capabilities = &sdk.ClientCapabilities{}
	client := sdk.NewClient(&sdk.Implementation{Name: "jetloop", Version: version}, copts)
	t, proc, err := transport(p, s, workDir, agent, session, watch)
	if err != nil {
		return nil, nil, err
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		if proc != nil {
			proc.kill()
			if tail := strings.TrimSpace(proc.stderr.String()); tail != "" {
				err = fmt.Errorf("%w (server's stderr: %s)", err, redact(p, s, lastLines(tail, 5)))
			}
		}
		return nil, nil, err
	}
	return cs, proc, nil
}

// redact takes the values of the variables a stdio server was given
// (env) out of its stderr: the error goes to apply's answer, logs and
// transcripts, where no secret may be.
func redact(p *Pool, s policies.MCPServer, text string) string {
	for _, name := range sortedKeys(s.Env) {
		if v := p.opts.Getenv(s.Env[name]); len(v) >= 4 {
			text = strings.ReplaceAll(text, v, "["+s.Env[name]+" redacted]")
		}
	}
	return text
}

// version is the client version the servers are told.
const version = "1"

// transport makes the SDK transport of a server; for a stdio server it
// starts the process.
func transport(p *Pool, s policies.MCPServer, workDir, agent, session string, watch *cancelWatch) (sdk.Transport, *process, error) {
	if s.URL != "" {
		h := http.Header{}
		for name, env := range s.HeadersEnv {
			v := p.opts.Getenv(env)
			if v == "" {
				return nil, nil, fmt.Errorf("header %s: environment variable %s is not set", name, env)
			}
			h.Set(name, v)
		}
		u, err := url.Parse(s.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("url %q: %w", s.URL, err)
		}
		return &sdk.StreamableClientTransport{
			Endpoint: s.URL,
			HTTPClient: &http.Client{
				Transport:     headers{base: p.opts.HTTPTransport, h: h, origin: origin(u), max: p.opts.MaxMessage, watch: watch},
				CheckRedirect: sameOrigin(u),
			},
			MaxEventSize: p.opts.MaxMessage,
		}, nil, nil
	}
	if workDir == "" {
		workDir = os.TempDir()
	}
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("work folder: %w", err)
	}
	env := append(minimalEnv(workDir), "JETLOOP_AGENT="+agent, "JETLOOP_SESSION="+session)
	for _, name := range sortedKeys(s.Env) {
		v := p.opts.Getenv(s.Env[name])
		if v == "" {
			return nil, nil, fmt.Errorf("env %s: environment variable %s is not set", name, s.Env[name])
		}
		env = append(env, name+"="+v)
	}
	trees, err := p.trees()
	if err != nil {
		return nil, nil, err
	}
	proc, stdout, stdin, err := startProcess(trees, s.Command, workDir, env, p.opts.StopGrace, agent+"/"+session+" mcp "+s.Name)
	if err != nil {
		return nil, nil, err
	}
	return &sdk.IOTransport{Reader: io.NopCloser(stdout), Writer: stdinCloser{stdin, proc, watch}, MaxLineLength: p.opts.MaxMessage}, proc, nil
}

// headers adds a server's configured headers to every request to the
// server's origin, and to no other: they hold secrets of the process. It
// also bounds a response that is one message (application/json, an
// error's body) to max bytes; an event stream's events are bounded by the
// SDK's MaxEventSize.
type headers struct {
	base   http.RoundTripper
	h      http.Header
	origin string
	max    int
	watch  *cancelWatch
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 && origin(r.URL) == t.origin {
		r = r.Clone(r.Context())
		for k, v := range t.h {
			r.Header[k] = v
		}
	}
	cancel := false
	if t.watch != nil && r.Method == http.MethodPost && r.GetBody != nil && r.ContentLength > 0 && r.ContentLength <= 4<<10 {
		if b, err := r.GetBody(); err == nil {
			msg, _ := io.ReadAll(b)
			cancel = isCancelNotification(msg)
		}
	}
	resp, err := t.base.RoundTrip(r)
	if cancel {
		t.watch.triedOne()
	}
	if err != nil || t.max <= 0 || resp.Body == nil {
		return resp, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: int64(t.max)}
	}
	return resp, nil
}

// errTooLarge is a server's message over Options.MaxMessage.
var errTooLarge = errors.New("mcp: the server's message is larger than the bound (Options.MaxMessage)")

// boundedBody fails a read past its bound.
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer
		// one; nothing past the bound is handed on.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// origin is a URL's scheme and host, as a redirect is compared.
func origin(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// sameOrigin refuses a redirect away from the declared server's origin:
// the tools of another server were never admitted.
func sameOrigin(declared *url.URL) func(*http.Request, []*http.Request) error {
	want := origin(declared)
	return func(r *http.Request, via []*http.Request) error {
		if got := origin(r.URL); got != want {
			return fmt.Errorf("redirected to %s, away from the declared %s: not followed", got, want)
		}
		if len(via) >= 5 {
			return fmt.Errorf("stopped after %d redirects", len(via))
		}
		return nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
