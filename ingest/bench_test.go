package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/loadgen"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// BenchmarkIngestVsRaw measures, in one run, signed GitHub webhooks
// through the HTTP handler into JetStream, and the raw JetStream
// operations each one needs at least (a jl_dedupe create and a publish of
// the same size), at the same concurrency, in alternating rounds, and
// reports the ratio, under
// the server's default sync interval and with every write fsynced, on one
// node and on a three-node cluster whose streams and buckets are
// replicated three times (R3/...).
func BenchmarkIngestVsRaw(b *testing.B) {
	for _, cluster := range []bool{false, true} {
		for _, syncing := range []string{"2m", "always"} {
			name := "sync=" + syncing
			if cluster {
				name = "R3/" + name
			}
			b.Run(name, func(b *testing.B) { benchIngestVsRaw(b, syncing, cluster) })
		}
	}
}

// benchReplicas are the nodes of the R3 cluster and the replicas of its
// streams and buckets.
const benchReplicas = 3

// startCluster is startTimeout on a three-node cluster (random loopback
// ports, temporary stores), the streams and buckets provisioned at
// replicas 3 as `--replicas 3` provisions them, and the client connected
// to one node picked at random from all three addresses (the webhooks
// and the raw pair share the connection, so both take the same path to
// the streams' leaders, wherever those are).
func startCluster(t testing.TB, window time.Duration, defs []string, timeout time.Duration, natsOpts ...natstest.Option) *harness {
	t.Helper()
	c := natstest.RunCluster(t, benchReplicas, natsOpts...)
	nc, err := c.Connect(nats.Name("ingest bench"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Names: names, DedupeWindow: window, Replicas: benchReplicas}); err != nil {
		t.Fatal(err)
	}
	// What the webhook and the raw pair write to: every replica of
	// them acknowledges a write before it is answered.
	for _, name := range []string{names.StreamIn(), streams.KVStream(names.BucketDedupe())} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != benchReplicas {
			t.Fatalf("%s has %d replicas, want %d", name, r, benchReplicas)
		}
	}
	h := serve(t, js, names, defs, timeout)
	h.nats, h.srv = c.URLs(), c.Nodes()[0]
	return h
}

func benchIngestVsRaw(b *testing.B, syncing string, cluster bool) {
	const workers = 16
	start := startTimeout
	if cluster {
		start = startCluster
	}
	// The ingest's default timeout, not the tests' short one: a moment
	// of a busy shared machine must not turn a slow answer into a 503.
	h := start(b, time.Minute, []string{reviewerYAML, demoYAML}, ingest.DefaultTimeout, natstest.WithSync(syncing))
	body := fixture(b, "pull_request/opened.payload.json")
	ctx := context.Background()
	// The raw pair's jl_dedupe create in its fastest form, the one the
	// dedupe store makes (rawCreate), of a value of the size of the
	// ingest's record (read back from a webhook sent before the rounds).
	nc := h.js.Conn()
	create := rawCreate(nc, h.names)
	// run makes op(w, i) for i in [from, to) on workers goroutines, w
	// the worker's number.
	run := func(from, to int, op func(w, i int) error) time.Duration {
		var next atomic.Int64
		next.Store(int64(from) - 1)
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i >= to {
						return
					}
					if err := op(w, i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	// The sender is the load, not what is measured, but it runs in this
	// process, on the same two cores: a load generator that writes as
	// wrk does, one keep-alive connection a worker, each request one write of bytes
	// built once (the body is the same for every delivery, the id is a
	// header: it is signed once, as the sender's work, not the
	// receiver's).
	headers := githubHeaders("pull_request", "", body)
	delete(headers, ingest.HeaderGitHubDelivery)
	webhook := benchRequest(b, h.url, "/webhooks/github", headers, body)
	conns := benchConns(b, h.url, workers)
	// What the sender costs, measured in the same rounds: the same
	// requests to a handler that answers 202 at once, from the load
	// generator and from net/http's client (which the benchmark used
	// before; its write buffer holds a request whole, so that it
	// allocates no 32 KB copy buffer per request).
	trivial := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	b.Cleanup(trivial.Close)
	trivialReq := benchRequest(b, trivial.URL, "/webhooks/github", headers, body)
	trivialConns := benchConns(b, trivial.URL, workers)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, WriteBufferSize: 64 << 10}}
	b.Cleanup(client.CloseIdleConnections)
	clientOp := func(_, i int) error {
		req, _ := http.NewRequest(http.MethodPost, trivial.URL+"/webhooks/github", bytes.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		req.Header.Set(ingest.HeaderGitHubDelivery, fmt.Sprint("bench-", i))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		// Read to the end: a body left unread closes the connection, and
		// every request would dial a new one.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	// A webhook before the rounds (ids run from 1), whose record the raw
	// create's value copies.
	if err := conns[0].Expect(webhook, "bench-0", http.StatusAccepted); err != nil {
		b.Fatal(err)
	}
	record := webhookRecord(b, h.js, h.names, body, "bench-0").Data
	rawOp := func(_, i int) error {
		if err := create(ctx, h.names.DedupeKey("https://github.com/bench", fmt.Sprint("raw-", i)), record); err != nil {
			return err
		}
		m := nats.NewMsg(fmt.Sprintf("jl.in.bench.s%d", i%64))
		m.Data = body
		m.Header.Set(nats.MsgIdHdr, fmt.Sprint("raw-", i))
		_, err := h.js.PublishMsg(ctx, m)
		return err
	}
	ingestOp := func(w, i int) error {
		return conns[w].Expect(webhook, "bench-"+strconv.Itoa(i), http.StatusAccepted)
	}
	senderOp := func(w, i int) error {
		return trivialConns[w].Expect(trivialReq, "bench-"+strconv.Itoa(i), http.StatusAccepted)
	}
	b.ResetTimer()
	// The two take turns in rounds, so both see the same load of a
	// shared machine.
	const rounds = 4
	var raw, viaHTTP time.Duration
	// The requests to JetStream each way makes, counted on the one
	// connection both use (the ingest's and the raw operations', nc above).
	var rawMsgs, ingestMsgs uint64
	// And the CPU time of the process (server, ingest and load alike)
	// each way takes, which a shared machine's load does not change as
	// it changes the rates: the rates' ratio tends to the inverse of
	// these when the machine is busy.
	var rawCPU, ingestCPU time.Duration
	// And the CPU of the same requests to the handler that answers at
	// once, from the load generator and from net/http's client.
	var senderCPU, clientCPU time.Duration
	for r := range rounds {
		from, to := 1+r*b.N/rounds, 1+(r+1)*b.N/rounds
		before, cpu0 := nc.Stats().OutMsgs, cpuTime(b)
		raw += run(from, to, rawOp)
		mid, cpu1 := nc.Stats().OutMsgs, cpuTime(b)
		viaHTTP += run(from, to, ingestOp)
		rawMsgs, ingestMsgs = rawMsgs+mid-before, ingestMsgs+nc.Stats().OutMsgs-mid
		cpu2 := cpuTime(b)
		rawCPU, ingestCPU = rawCPU+cpu1-cpu0, ingestCPU+cpu2-cpu1
		run(from, to, senderOp)
		cpu3 := cpuTime(b)
		run(from, to, clientOp)
		senderCPU, clientCPU = senderCPU+cpu3-cpu2, clientCPU+cpuTime(b)-cpu3
	}
	b.StopTimer()
	b.ReportMetric(float64(rawMsgs)/float64(b.N), "raw-js-msgs/op")
	b.ReportMetric(float64(ingestMsgs)/float64(b.N), "ingest-js-msgs/op")
	b.ReportMetric(float64(rawCPU.Microseconds())/float64(b.N), "raw-cpu-µs/op")
	b.ReportMetric(float64(ingestCPU.Microseconds())/float64(b.N), "ingest-cpu-µs/op")
	b.ReportMetric(float64(senderCPU.Microseconds())/float64(b.N), "sender-cpu-µs/op")
	b.ReportMetric(float64(clientCPU.Microseconds())/float64(b.N), "nethttp-sender-cpu-µs/op")
	rawRate := float64(b.N) / raw.Seconds()
	ingestRate := float64(b.N) / viaHTTP.Seconds()
	b.ReportMetric(rawRate, "raw/s")
	b.ReportMetric(ingestRate, "ingest/s")
	b.ReportMetric(ingestRate/rawRate, "ratio")
	b.Logf("n=%d: raw JetStream %.0f/s, ingest %.0f/s, ratio %.2f (target at least 0.50)", b.N, rawRate, ingestRate, ingestRate/rawRate)
}

// benchRequest is the load generator's request to target of the server at
// url (http://host:port), with the headers and body, and the GitHub
// delivery id given per request.
func benchRequest(b *testing.B, url, target string, headers map[string]string, body []byte) *loadgen.Request {
	hdr := http.Header{}
	for k, v := range headers {
		hdr.Set(k, v)
	}
	r, err := loadgen.NewRequest(http.MethodPost, strings.TrimPrefix(url, "http://"), target, hdr, ingest.HeaderGitHubDelivery, body)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// benchConns are n load generator connections to the server at url, one
// a worker, closed when the benchmark ends.
func benchConns(b *testing.B, url string, n int) []*loadgen.Conn {
	conns := make([]*loadgen.Conn, n)
	for i := range conns {
		conns[i] = loadgen.NewConn(strings.TrimPrefix(url, "http://"), time.Minute)
		b.Cleanup(func() { _ = conns[i].Close() })
	}
	return conns
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
