package mcp_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools/mcp"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
)

var quiet = slog.New(slog.DiscardHandler)

// BenchmarkCancel measures how soon a cancel of a call in flight reaches
// the server as notifications/cancelled, and how soon the call returns,
// against a ping's round trip on the same connection (what the best
// possible cancellation costs: one message to the server).
func BenchmarkCancel(b *testing.B) {
	rec := mcptest.NewRecorder()
	h := mcptest.ServeHTTP(b, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv", Record: rec.Record}) })
	p, err := mcp.NewPool(mcp.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	def := admitB(b, p, policies.MCPServer{Name: "srv", URL: h.URL, Tools: []string{"slow", "echo"}})
	slow := toolByName(b, p, def, "srv.slow")
	echo := toolByName(b, p, def, "srv.echo")

	// The ping-like baseline: a call that does nothing, on the same
	// connection.
	var base time.Duration
	for range 20 {
		start := time.Now()
		if _, err := echo.Call(context.Background(), callOf("s1", `{"text":"x"}`)); err != nil {
			b.Fatal(err)
		}
		base += time.Since(start)
	}
	base /= 20

	var toServer, toReturn time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		calls := rec.Count("call", "slow")
		notes := rec.Count("notifications/cancelled", "")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan time.Time, 1)
		go func() {
			_, _ = slow.Call(ctx, callOf("s1", `{}`))
			done <- time.Now()
		}()
		rec.WaitN(b, "call", "slow", calls+1, 10*time.Second)
		start := time.Now()
		cancel()
		returned := <-done
		rec.WaitN(b, "notifications/cancelled", "", notes+1, 10*time.Second)
		var at time.Time
		for _, e := range rec.Events() {
			if e.Kind == "notifications/cancelled" {
				at = e.Time
			}
		}
		toServer += at.Sub(start)
		toReturn += returned.Sub(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(toServer.Microseconds())/float64(b.N)/1000, "ms-to-server")
	b.ReportMetric(float64(toReturn.Microseconds())/float64(b.N)/1000, "ms-to-return")
	b.ReportMetric(float64(base.Microseconds())/1000, "ms-call-roundtrip")
	b.ReportMetric(float64(toServer)/float64(b.N)/float64(base), "to-server/roundtrip")
}

// BenchmarkReconnectStorm opens the connections of many sessions to two
// servers at once, as the successor of a worker that held them all does,
// and measures how the connects reach each server: the largest number in
// any 100 ms, and how long the herd took, with the connect rate bound
// (default) and without it.
func BenchmarkReconnectStorm(b *testing.B) {
	const sessions = 100
	for _, tt := range []struct {
		name string
		rate float64
	}{
		{"bounded", 0},
		{"unbounded", -1},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var peak, spread float64
			for i := 0; i < b.N; i++ {
				var mu sync.Mutex
				var news []time.Time
				count := func(next http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
							body, _ := io.ReadAll(r.Body)
							r.Body = io.NopCloser(bytes.NewReader(body))
							if bytes.Contains(body, []byte(`"method":"initialize"`)) {
								mu.Lock()
								news = append(news, time.Now())
								mu.Unlock()
							}
						}
						next.ServeHTTP(w, r)
					})
				}
				var decls []policies.MCPServer
				for _, name := range []string{"one", "two"} {
					h := mcptest.ServeHTTP(b, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: name}) }, count)
					decls = append(decls, policies.MCPServer{Name: name, URL: h.URL, Tools: []string{"echo"}})
				}
				p, err := mcp.NewPool(mcp.Options{ConnectRate: tt.rate, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				def := admitB(b, p, decls...)
				mu.Lock()
				news = nil // the admission's own connects
				mu.Unlock()
				var wg sync.WaitGroup
				for s := range sessions {
					for _, name := range []string{"one.echo", "two.echo"} {
						tl := toolByName(b, p, def, name)
						wg.Go(func() {
							ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
							defer cancel()
							res, err := tl.Call(ctx, callOf(sessionName(s), `{"text":"x"}`))
							if err != nil || res.IsError {
								b.Errorf("call: %+v, %v", res, err)
							}
						})
					}
				}
				wg.Wait()
				p.Close()
				mu.Lock()
				pk, sp := herd(news)
				mu.Unlock()
				peak += pk
				spread += sp
			}
			b.ReportMetric(peak/float64(b.N), "peak-connects/100ms")
			b.ReportMetric(spread/float64(b.N), "herd-ms")
			b.ReportMetric(float64(sessions*2), "connects")
		})
	}
}

// herd is the most connects in any 100 ms window, and the time from the
// first to the last, in ms.
func herd(ts []time.Time) (peak, spreadMS float64) {
	if len(ts) == 0 {
		return 0, 0
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= 100*time.Millisecond {
			j++
		}
		peak = max(peak, float64(i-j+1))
	}
	return peak, float64(ts[len(ts)-1].Sub(ts[0]).Microseconds()) / 1000
}
