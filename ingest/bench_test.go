package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ingest"
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
	kv, err := h.js.KeyValue(ctx, h.names.BucketDedupe())
	if err != nil {
		b.Fatal(err)
	}
	// run makes op(i) for i in [from, to) on workers goroutines.
	run := func(from, to int, op func(i int) error) time.Duration {
		var next atomic.Int64
		next.Store(int64(from) - 1)
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i >= to {
						return
					}
					if err := op(i); err != nil {
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
	// process: a write buffer that holds a request whole keeps it from
	// allocating a 32 KB copy buffer per request (net/http hands a body
	// that does not fit to the connection's ReadFrom, which does), whose
	// collection would be charged to the ingest.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, WriteBufferSize: 64 << 10}}
	// The body is the same for every delivery (the id is a header): it is
	// signed once, as the sender's work, not the receiver's.
	headers := githubHeaders("pull_request", "", body)
	rawOp := func(i int) error {
		if _, err := kv.Create(ctx, h.names.DedupeKey("https://github.com/bench", fmt.Sprint("raw-", i)), []byte(`{}`)); err != nil {
			return err
		}
		m := nats.NewMsg(fmt.Sprintf("jl.in.bench.s%d", i%64))
		m.Data = body
		m.Header.Set(nats.MsgIdHdr, fmt.Sprint("raw-", i))
		_, err := h.js.PublishMsg(ctx, m)
		return err
	}
	ingestOp := func(i int) error {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/webhooks/github", bytes.NewReader(body))
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
	b.ResetTimer()
	// The two take turns in rounds, so both see the same load of a
	// shared machine.
	const rounds = 4
	var raw, viaHTTP time.Duration
	// The requests to JetStream each way makes, counted on the one
	// connection both use (the ingest's and the raw operations').
	nc := h.js.Conn()
	var rawMsgs, ingestMsgs uint64
	// And the CPU time of the process (server, ingest and load alike)
	// each way takes, which a shared machine's load does not change as
	// it changes the rates: the rates' ratio tends to the inverse of
	// these when the machine is busy.
	var rawCPU, ingestCPU time.Duration
	for r := range rounds {
		from, to := 1+r*b.N/rounds, 1+(r+1)*b.N/rounds
		before, cpu0 := nc.Stats().OutMsgs, cpuTime(b)
		raw += run(from, to, rawOp)
		mid, cpu1 := nc.Stats().OutMsgs, cpuTime(b)
		viaHTTP += run(from, to, ingestOp)
		rawMsgs, ingestMsgs = rawMsgs+mid-before, ingestMsgs+nc.Stats().OutMsgs-mid
		rawCPU, ingestCPU = rawCPU+cpu1-cpu0, ingestCPU+cpuTime(b)-cpu1
	}
	b.StopTimer()
	b.ReportMetric(float64(rawMsgs)/float64(b.N), "raw-js-msgs/op")
	b.ReportMetric(float64(ingestMsgs)/float64(b.N), "ingest-js-msgs/op")
	b.ReportMetric(float64(rawCPU.Microseconds())/float64(b.N), "raw-cpu-µs/op")
	b.ReportMetric(float64(ingestCPU.Microseconds())/float64(b.N), "ingest-cpu-µs/op")
	rawRate := float64(b.N) / raw.Seconds()
	ingestRate := float64(b.N) / viaHTTP.Seconds()
	b.ReportMetric(rawRate, "raw/s")
	b.ReportMetric(ingestRate, "ingest/s")
	b.ReportMetric(ingestRate/rawRate, "ratio")
	b.Logf("n=%d: raw JetStream %.0f/s, ingest %.0f/s, ratio %.2f (target at least 0.50)", b.N, rawRate, ingestRate, ingestRate/rawRate)
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
