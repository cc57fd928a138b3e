package ingest_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/ingest/gate"
)

// attack is senders without credentials, each connection from one of
// addrs in turn, declaring a body of length and trickling it one byte a
// second; when the server answers or cuts a connection, it is opened
// again.
type attack struct {
	conns  int
	addrs  []string
	length int64
}

// attackTally counts the answers the attackers got, by status (0: the
// connection was closed without one).
type attackTally struct {
	mu     sync.Mutex
	status map[int]int
}

func (a *attackTally) add(status int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status[status]++
}

func (a *attackTally) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprint(a.status)
}

func (a *attackTally) count(status int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status[status]
}

// run keeps the attack going until ctx ends.
func (a attack) run(ctx context.Context, t *testing.T, target string, tally *attackTally) *sync.WaitGroup {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range a.conns {
		local := &net.TCPAddr{IP: net.ParseIP(a.addrs[i%len(a.addrs)])}
		wg.Go(func() {
			for ctx.Err() == nil {
				tally.add(a.once(ctx, local, u))
				select {
				case <-ctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
		})
	}
	return &wg
}

// once opens one connection and trickles until the server answers,
// closes it, or ctx ends.
func (a attack) once(ctx context.Context, local *net.TCPAddr, u *url.URL) int {
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return -1
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"%s: push\r\n%s: attack\r\n%s: sha256=%s\r\n\r\n{",
		u.Path, u.Host, a.length, ingest.HeaderGitHubEvent, ingest.HeaderGitHubDelivery, ingest.HeaderGitHubSignature, strings.Repeat("0", 64))
	answered := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case st := <-answered:
			return st
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				return <-answered
			}
		}
	}
}

// Senders without credentials cannot starve the rest: while connections
// that claim to be GitHub trickle large bodies, or hold many small bodies
// that never finish, signed webhooks and user requests are answered 2xx
// throughout, and every trickling connection is cut within seconds, long
// before the server's read timeout.
func TestUnverifiedSendersCannotStarveTheRest(t *testing.T) {
	tests := []struct {
		name   string
		attack attack
		// networks, when set, is the GitHub receiver's source allowlist.
		networks string
	}{
		{name: "slow large bodies", attack: attack{conns: 8, addrs: []string{"127.0.0.2"}, length: 16 << 20}},
		// Two addresses' shares are the whole unverified pool's bytes
		// when bodies count by their declared length.
		{name: "slow large bodies from two addresses", attack: attack{conns: 4, addrs: []string{"127.0.0.2", "127.0.0.3"}, length: 16 << 20}},
		{name: "never-finishing small bodies", attack: attack{conns: 300, addrs: []string{"127.0.0.2"}, length: 100}},
		{name: "never-finishing small bodies from many addresses outside GitHub's networks",
			attack:   attack{conns: 300, addrs: []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}, length: 100},
			networks: "127.0.0.1/32\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startConfig(t, nil, func(c *ingest.Config) {
				if tt.networks != "" {
					n, err := gate.ParseNetworks("networks", []byte(tt.networks))
					if err != nil {
						t.Fatal(err)
					}
					c.GitHubNetworks = n
				}
			}, reviewerYAML, demoYAML)
			ctx, stop := context.WithCancel(context.Background())
			tally := &attackTally{status: map[int]int{}}
			wg := tt.attack.run(ctx, t, h.url+"/webhooks/github", tally)
			defer func() { stop(); wg.Wait() }()

			pr := fixture(t, "pull_request/opened.payload.json")
			// Long enough for the attack to be in place and for its first
			// connections to be cut.
			until := time.Now().Add(6 * time.Second)
			var legit int
			for i := 0; time.Now().Before(until); i++ {
				hook := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", fmt.Sprintf("legit-%d", i), pr), pr)
				if hook.status/100 != 2 {
					t.Fatalf("signed webhook %d during the attack: %d %s (attackers got %s)", i, hook.status, hook.raw, tally)
				}
				req := post(t, h.url+"/v1/agents/demo/sessions/s1/messages",
					map[string]string{"Authorization": "Bearer " + token}, []byte(fmt.Sprintf(`{"text": "hello %d"}`, i)))
				if req.status/100 != 2 {
					t.Fatalf("user request %d during the attack: %d %s (attackers got %s)", i, req.status, req.raw, tally)
				}
				legit++
				time.Sleep(100 * time.Millisecond) // pacing of the honest senders, not synchronisation
			}
			// The attack was real: its connections were refused or cut,
			// never left to hold their slot.
			stopped := http.StatusRequestTimeout
			if tt.networks != "" {
				stopped = http.StatusForbidden
			}
			if tally.count(stopped) == 0 {
				t.Fatalf("no attacking connection was stopped with %d: %s", stopped, tally)
			}
			t.Logf("%d signed webhooks and %d user requests answered 2xx; attackers got %s", legit, legit, tally)
		})
	}
}
