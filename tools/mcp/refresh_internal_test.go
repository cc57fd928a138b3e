package mcp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
)

// TestListChangedFloodListsOnceAtATime: a server that sends
// tools/list_changed over and over (a buggy or hostile one) costs at most
// one tools/list in flight per connection and one more after it, not a
// goroutine and a whole list (up to maxListBytes) per notification.
func TestListChangedFloodListsOnceAtATime(t *testing.T) {
	var (
		mu                   sync.Mutex
		hold                 bool
		inflight, max, lists int
	)
	gate := make(chan struct{})
	h := mcptest.ServeHTTP(t, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv"}) },
		func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					mu.Lock()
					held := hold && bytes.Contains(body, []byte(`"tools/list"`))
					if held {
						lists++
						inflight++
						max = maxOf(max, inflight)
					}
					mu.Unlock()
					if held {
						<-gate // held together, the lists asked for at once
						mu.Lock()
						inflight--
						mu.Unlock()
					}
				}
				next.ServeHTTP(w, r)
			})
		})
	p, err := NewPool(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := p.conn("a", "s1", policies.MCPServer{Name: "srv", URL: h.URL, Tools: []string{"echo"}}, "fp", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := c.session(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	hold = true
	mu.Unlock()
	c.listChanged()
	natstest.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if inflight == 0 {
			return errNotYet
		}
		return nil
	})
	// 50 more while the server holds the list: they were sent after the
	// list was asked for, so the server's tools are listed once more.
	for range 50 {
		c.listChanged()
	}
	close(gate)
	natstest.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if inflight > 0 || lists < 2 {
			return errNotYet
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if max > 1 || lists > 2 {
		t.Fatalf("51 tools/list_changed made %d tools/list, %d at once; want at most 2, one at a time", lists, max)
	}
}

var errNotYet = errorString("not yet")

type errorString string

func (e errorString) Error() string { return string(e) }

func maxOf(a, b int) int {
	if a > b {
		return a
	}
	return b
}
