package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/loadgen"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// ingestSecret signs the measured webhooks.
const ingestSecret = "jetloop-bench"

// reviewer is the agent the webhooks are admitted to, a session per PR.
var reviewer = policies.Definition{
	Name:  "reviewer",
	Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "LGTM."}}},
	Triggers: []policies.Trigger{{
		Name:    "pr",
		When:    `event.type == "com.github.pull_request.opened" && !event.data.pull_request.draft`,
		Session: `event.data.repository.full_name + "#" + string(event.data.pull_request.number)`,
	}},
}

// prBody is a pull_request.opened payload of about the size GitHub sends
// (their bodies run 10 to 30 KB): the fields the agent reads, and a
// description that makes up the rest.
func prBody(n int) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": "opened", "number": n,
		"pull_request": map[string]any{"number": n, "draft": false, "title": "Bench", "body": strings.Repeat("A pull request description. ", 450)},
		"repository":   map[string]any{"full_name": "bench/repo"},
	})
	return b
}

// benchIngest posts Events signed webhooks through the ingest's HTTP
// handler on a loopback listener, Concurrency at a time, and the raw
// operations each needs at least at the same concurrency, in alternating
// rounds, and compares.
func benchIngest(ctx context.Context, e *env) (map[string]float64, error) {
	c, err := policies.Compile(reviewer)
	if err != nil {
		return nil, err
	}
	rules := admission.NewRules()
	rules.Set(c)
	adm, err := admission.New(ctx, e.js, rules, admission.Config{Names: e.names})
	if err != nil {
		return nil, err
	}
	store, err := dedupe.New(ctx, e.js, dedupe.Config{Names: e.names})
	if err != nil {
		return nil, err
	}
	srv, err := ingest.New(ingest.Config{Names: e.names, GitHubSecret: []byte(ingestSecret)}, e.js, store, adm)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = hs.Serve(l) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		wg.Wait()
	}()
	n, conc := e.cfg.Events, e.cfg.Concurrency
	body := prBody(1)
	// pool is how many pull requests (sessions) the webhooks are spread over.
	const pool = 64
	// The raw pair's jl_dedupe create in its fastest form, the one the
	// dedupe store makes: one publish to the key's subject with the
	// headers the store's create sends (no message of the key expected
	// before, the store's per-key TTL), the ack read by hand (not the KV
	// API's Create, with its key check, options and header building), so
	// that the ingest is compared with the best possible client of the
	// same server operations. Its value is of the size of the ingest's
	// record of a webhook (record, read back from one sent before the
	// rounds).
	nc, createPre := e.js.Conn(), "$KV."+e.names.BucketDedupe()+"."
	ttl := streams.DefaultDedupeTTL.String()
	ackPre := []byte(`{"stream":`)
	create := func(ctx context.Context, key string, value []byte) error {
		m := &nats.Msg{Subject: createPre + key, Data: value, Header: nats.Header{
			"Nats-Expected-Last-Subject-Sequence": {"0"},
			jetstream.MsgTTLHeader:                {ttl},
		}}
		ack, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return fmt.Errorf("create %s: %w", key, err)
		}
		if !bytes.HasPrefix(ack.Data, ackPre) {
			return fmt.Errorf("create %s: %s", key, ack.Data)
		}
		return nil
	}
	var record []byte
	rawOp := func(ctx context.Context, _, i int) error {
		if err := create(ctx, e.names.DedupeKey("https://github.com/bench/raw", fmt.Sprint("raw-", i)), record); err != nil {
			return err
		}
		ref, err := streams.NewSessionRef("raw", fmt.Sprintf("bench/repo#%d", i%pool))
		if err != nil {
			return err
		}
		m := nats.NewMsg(e.names.In(ref))
		m.Data = body
		m.Header.Set(nats.MsgIdHdr, fmt.Sprint("raw-", i))
		_, err = e.js.PublishMsg(ctx, m)
		return err
	}
	// The sender is the load, not what is measured, but it runs in this
	// process, on the same cores: a load generator that writes as wrk
	// does, one keep-alive connection a worker, each request one write of bytes
	// built before (the bodies and their signatures are the sender's
	// work, not the receiver's); only the delivery id changes.
	requests, err := signedRequests(l.Addr().String(), pool)
	if err != nil {
		return nil, err
	}
	conns := newConns(l.Addr().String(), conc)
	defer closeConns(conns)
	ingestOp := func(_ context.Context, w, i int) error {
		if err := conns[w].Expect(requests[i%pool], "bench-"+strconv.Itoa(i), http.StatusAccepted); err != nil {
			return fmt.Errorf("webhook %d: %w", i, err)
		}
		return nil
	}
	if err := conns[0].Expect(requests[0], "bench-probe", http.StatusAccepted); err != nil {
		return nil, fmt.Errorf("webhook bench-probe: %w", err)
	}
	if record, err = dedupeRecord(ctx, e, "https://github.com/bench/repo", "bench-probe"); err != nil {
		return nil, err
	}
	// What the sender costs, in the same rounds: the same requests to a
	// handler that answers 202 at once, from the load generator and from
	// net/http's client.
	trivial, err := startTrivial()
	if err != nil {
		return nil, err
	}
	defer trivial.stop()
	trivialRequests, err := signedRequests(trivial.addr, pool)
	if err != nil {
		return nil, err
	}
	trivialConns := newConns(trivial.addr, conc)
	defer closeConns(trivialConns)
	senderOp := func(_ context.Context, w, i int) error {
		return trivialConns[w].Expect(trivialRequests[i%pool], "bench-"+strconv.Itoa(i), http.StatusAccepted)
	}
	// A write buffer that holds a request whole, so that net/http's
	// client allocates no 32 KB copy buffer per request.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, WriteBufferSize: 64 << 10}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	type signed struct {
		body []byte
		sig  string
	}
	bodies := make([]signed, pool)
	for i := range bodies {
		b := prBody(i)
		bodies[i] = signed{b, ingest.Sign([]byte(ingestSecret), b)}
	}
	clientOp := func(ctx context.Context, _, i int) error {
		sb := bodies[i%pool]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+trivial.addr+"/webhooks/github", bytes.NewReader(sb.body))
		if err != nil {
			return err
		}
		req.Header.Set(ingest.HeaderGitHubEvent, "pull_request")
		req.Header.Set(ingest.HeaderGitHubDelivery, fmt.Sprintf("bench-%d", i))
		req.Header.Set(ingest.HeaderGitHubSignature, sb.sig)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		// Read to the end, or the connection is not reused.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("answered %d", resp.StatusCode)
		}
		return nil
	}
	// The two take turns in rounds, so both see the same load of a
	// shared machine.
	const rounds = 4
	var raw, via time.Duration
	// Beside the rates, what each way asks of JetStream (the messages
	// sent on the one connection both use) and the CPU time the process
	// (servers, ingest and sender alike) spends on it: on a busy machine
	// the rates' ratio tends to the inverse of the CPU's.
	// nc is the connection of both (above).
	var rawMsgs, ingestMsgs uint64
	var rawCPU, ingestCPU, senderCPU, clientCPU time.Duration
	for r := range rounds {
		from, to := r*n/rounds, (r+1)*n/rounds
		msgs0, cpu0 := nc.Stats().OutMsgs, cpuTime()
		d, err := parallel(ctx, to-from, conc, func(ctx context.Context, w, i int) error { return rawOp(ctx, w, from+i) })
		if err != nil {
			return nil, fmt.Errorf("raw operations: %w", err)
		}
		raw += d
		msgs1, cpu1 := nc.Stats().OutMsgs, cpuTime()
		if d, err = parallel(ctx, to-from, conc, func(ctx context.Context, w, i int) error { return ingestOp(ctx, w, from+i) }); err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		via += d
		cpu2 := cpuTime()
		rawMsgs, ingestMsgs = rawMsgs+msgs1-msgs0, ingestMsgs+nc.Stats().OutMsgs-msgs1
		rawCPU, ingestCPU = rawCPU+cpu1-cpu0, ingestCPU+cpu2-cpu1
		if _, err := parallel(ctx, to-from, conc, func(ctx context.Context, w, i int) error { return senderOp(ctx, w, from+i) }); err != nil {
			return nil, fmt.Errorf("load generator to a 202 handler: %w", err)
		}
		cpu3 := cpuTime()
		if _, err := parallel(ctx, to-from, conc, func(ctx context.Context, w, i int) error { return clientOp(ctx, w, from+i) }); err != nil {
			return nil, fmt.Errorf("net/http client to a 202 handler: %w", err)
		}
		senderCPU, clientCPU = senderCPU+cpu3-cpu2, clientCPU+cpuTime()-cpu3
	}
	// The copies of what both ways write to.
	placed, err := e.placed(ctx, e.names.StreamIn(), streams.KVStream(e.names.BucketDedupe()))
	if err != nil {
		return nil, err
	}
	rawRate, ingestRate := float64(n)/raw.Seconds(), float64(n)/via.Seconds()
	return map[string]float64{
		"replicas":       placed,
		"events/s":       ingestRate,
		"raw-events/s":   rawRate,
		"ratio":          ingestRate / rawRate,
		"body-bytes":     float64(len(body)),
		"js-msgs/event":  float64(ingestMsgs) / float64(n),
		"raw-js-msgs/op": float64(rawMsgs) / float64(n),
		"cpu-us/event":   float64(ingestCPU.Microseconds()) / float64(n),
		"raw-cpu-us/op":  float64(rawCPU.Microseconds()) / float64(n),
		// The CPU of the process a request to a handler that answers
		// 202 at once: the load generator and net/http's server side
		// of the exchange (which a webhook's cpu-us/event has too);
		// and the same from net/http's client.
		"sender-cpu-us/op":         float64(senderCPU.Microseconds()) / float64(n),
		"nethttp-sender-cpu-us/op": float64(clientCPU.Microseconds()) / float64(n),
	}, nil
}

// cpuTime is the user and system CPU time the process has used; 0 where
// it cannot be read.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// signedRequests are the load generator's webhooks to the ingest at addr,
// one a pull request of the pool, signed.
func signedRequests(addr string, pool int) ([]*loadgen.Request, error) {
	out := make([]*loadgen.Request, pool)
	for i := range out {
		b := prBody(i)
		hdr := http.Header{}
		hdr.Set(ingest.HeaderGitHubEvent, "pull_request")
		hdr.Set(ingest.HeaderGitHubSignature, ingest.Sign([]byte(ingestSecret), b))
		hdr.Set("Content-Type", "application/json")
		r, err := loadgen.NewRequest(http.MethodPost, addr, "/webhooks/github", hdr, ingest.HeaderGitHubDelivery, b)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// newConns are n load generator connections to addr, one a worker.
func newConns(addr string, n int) []*loadgen.Conn {
	conns := make([]*loadgen.Conn, n)
	for i := range conns {
		conns[i] = loadgen.NewConn(addr, 30*time.Second)
	}
	return conns
}

// closeConns closes the connections.
func closeConns(conns []*loadgen.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// trivialServer is an HTTP server on loopback whose handler answers 202
// at once: what the sender's requests cost without a receiver's work.
type trivialServer struct {
	addr string
	stop func()
}

// startTrivial starts a trivialServer.
func startTrivial() (*trivialServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = hs.Serve(l) })
	return &trivialServer{addr: l.Addr().String(), stop: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		wg.Wait()
	}}, nil
}

// parallel calls op for 1..n from conc goroutines (w, 0..conc-1, the
// caller's) and returns how long it took; the first error stops it.
func parallel(ctx context.Context, n, conc int, op func(ctx context.Context, w, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n || ctx.Err() != nil {
					return
				}
				if err := op(ctx, w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return 0, first
	}
	return elapsed, ctx.Err()
}

// dedupeRecord is the value the ingest recorded in jl_dedupe for the
// event of source and id.
func dedupeRecord(ctx context.Context, e *env, source, id string) ([]byte, error) {
	s, err := e.js.Stream(ctx, streams.KVStream(e.names.BucketDedupe()))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", e.names.BucketDedupe(), err)
	}
	key := e.names.DedupeKey(source, id)
	// On a cluster a replica behind the leader may answer the direct get
	// before it holds the record: ask again for a while.
	deadline := time.Now().Add(10 * time.Second)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		m, err := s.GetLastMsgForSubject(ctx, "$KV."+e.names.BucketDedupe()+"."+key)
		if err == nil {
			return m.Data, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) || time.Now().After(deadline) {
			return nil, fmt.Errorf("the record of %s (source %q, id %q): %w", key, source, id, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the record of %s (source %q, id %q): %w", key, source, id, ctx.Err())
		case <-time.After(wait):
		}
	}
}
