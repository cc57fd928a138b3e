package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/nats-io/nats.go"
)

// BenchmarkIngestVsRaw measures, in one run, signed GitHub webhooks
// through the HTTP handler into JetStream, and the raw JetStream
// operations each one needs at least (a jl_dedupe create and a publish of
// the same size), at the same concurrency, and reports the ratio, under
// the server's default sync interval and with every write fsynced.
func BenchmarkIngestVsRaw(b *testing.B) {
	for _, syncing := range []string{"2m", "always"} {
		b.Run("sync="+syncing, func(b *testing.B) { benchIngestVsRaw(b, syncing) })
	}
}

func benchIngestVsRaw(b *testing.B, syncing string) {
	const workers = 16
	h := start(b, time.Minute, natstest.WithSync(syncing))
	body := fixture(b, "pull_request/opened.payload.json")
	ctx := context.Background()
	kv, err := h.js.KeyValue(ctx, h.names.BucketDedupe())
	if err != nil {
		b.Fatal(err)
	}
	run := func(op func(i int) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i > b.N {
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
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	b.ResetTimer()
	raw := run(func(i int) error {
		if _, err := kv.Create(ctx, h.names.DedupeKey("https://github.com/bench", fmt.Sprint("raw-", i)), []byte(`{}`)); err != nil {
			return err
		}
		m := nats.NewMsg(fmt.Sprintf("jl.in.bench.s%d", i%64))
		m.Data = body
		m.Header.Set(nats.MsgIdHdr, fmt.Sprint("raw-", i))
		_, err := h.js.PublishMsg(ctx, m)
		return err
	})
	viaHTTP := run(func(i int) error {
		delivery := fmt.Sprint("bench-", i)
		req, _ := http.NewRequest(http.MethodPost, h.url+"/webhooks/github", bytes.NewReader(body))
		for k, v := range githubHeaders("pull_request", delivery, body) {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	b.StopTimer()
	rawRate := float64(b.N) / raw.Seconds()
	ingestRate := float64(b.N) / viaHTTP.Seconds()
	b.ReportMetric(rawRate, "raw/s")
	b.ReportMetric(ingestRate, "ingest/s")
	b.ReportMetric(ingestRate/rawRate, "ratio")
	b.Logf("n=%d: raw JetStream %.0f/s, ingest %.0f/s, ratio %.2f (target at least 0.50)", b.N, rawRate, ingestRate, ingestRate/rawRate)
}
