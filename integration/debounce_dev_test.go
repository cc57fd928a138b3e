package integration

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDevDebounceCountsEveryEventOnce hammers a debounced agent on
// `jetloop dev`: several senders per session post requests at uneven
// paces, so events come while a burst is pending, as it is due and as it
// fires, and max_wait cuts a never-quiet session's bursts. Every request
// answered 2xx is counted once across the session's bursts, no burst runs
// twice, and each burst's latest event is one that was sent.
func TestDevDebounceCountsEveryEventOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	const token = "debounce-token"
	t.Setenv("JETLOOP_INGEST_TOKEN", token)
	p, ready := startDev(t, bin)
	url := ready["nats"]
	def := `name: hammered
model: {provider: scripted, script: [{text: Counted.}]}
triggers:
  - name: request
    when: 'event.type == "dev.jetloop.request"'
    session: event.subject
    debounce: {window: 1s, max_wait: 3s}
`
	path := filepath.Join(t.TempDir(), "hammered.yaml")
	if err := os.WriteFile(path, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := runCLI(t, bin, []string{"JETLOOP_SERVER=" + url}, "apply", path); err != nil {
		t.Fatalf("apply: %v\n%s%s", err, out, stderr)
	}

	const (
		sessions = 3
		senders  = 2 // per session
		period   = 12 * time.Second
	)
	type sentIDs struct {
		mu        sync.Mutex
		ok, tried map[string]bool
	}
	sent := make([]*sentIDs, sessions)
	for i := range sent {
		sent[i] = &sentIDs{ok: map[string]bool{}, tried: map[string]bool{}}
	}
	post := func(session int, key string) bool {
		body := strings.NewReader(fmt.Sprintf(`{"text": "request %s"}`, key))
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/agents/hammered/sessions/s%d/messages", ready["http"], session), body)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		c := http.Client{Timeout: 10 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode/100 == 2
	}
	var wg sync.WaitGroup
	end := time.Now().Add(period)
	for s := range sessions {
		for w := range senders {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(s), uint64(w)))
				for n := 0; time.Now().Before(end); n++ {
					key := fmt.Sprintf("s%d-w%d-%d", s, w, n)
					ids := sent[s]
					ids.mu.Lock()
					ids.tried[key] = true
					ids.mu.Unlock()
					for range 3 {
						if post(s, key) {
							ids.mu.Lock()
							ids.ok[key] = true
							ids.mu.Unlock()
							break
						}
					}
					// Session 0 is never quiet for the window: max_wait
					// cuts its bursts. The others pause now and then.
					pause := time.Duration(r.IntN(400)) * time.Millisecond
					if s > 0 && r.IntN(4) == 0 {
						pause = time.Duration(800+r.IntN(900)) * time.Millisecond
					}
					time.Sleep(pause) // the senders' pace, not a wait for an event
				}
			})
		}
	}
	wg.Wait()

	for s := range sessions {
		ids := sent[s]
		if len(ids.ok) == 0 {
			t.Fatalf("session s%d: no request answered 2xx", s)
		}
		ref := fmt.Sprintf("hammered/s%d", s)
		// Settled: every burst has fired and run (the last within
		// max_wait of the senders' end).
		sh := awaitShow(t, p, bin, url, ref, time.Minute, func(sh showJSON) error {
			if total := burstsOf(sh).total; sh.Status == "working" || total < len(ids.ok) {
				return fmt.Errorf("status %s, %d of %d requests run", sh.Status, total, len(ids.ok))
			}
			return nil
		})
		b, seen := burstsOf(sh), map[string]bool{}
		for _, id := range b.latest {
			if seen[id] {
				t.Errorf("%s: the burst of latest event %s ran twice", ref, id)
			}
			seen[id] = true
			if !ids.tried[id] {
				t.Errorf("%s: a burst's latest event %s was never sent", ref, id)
			}
		}
		if b.total < len(ids.ok) || b.total > len(ids.tried) {
			t.Errorf("%s: %d bursts count %d requests; %d were answered 2xx, %d sent", ref, len(b.latest), b.total, len(ids.ok), len(ids.tried))
		}
		t.Logf("%s: %d bursts count %d requests; %d answered 2xx, %d sent", ref, len(b.latest), b.total, len(ids.ok), len(ids.tried))
	}
	if t.Failed() {
		t.Logf("dev stderr:\n%s", p.Stderr())
	}
}

// bursts are the event entries of a debounced session: each burst's
// latest event id, and the events they count in all.
type bursts struct {
	latest []string
	total  int
}

func burstsOf(sh showJSON) bursts {
	var b bursts
	for _, e := range sh.Transcript {
		ev, ok := e["event"].(map[string]any)
		if !ok || (e["kind"] != "user" && e["kind"] != "event") {
			continue
		}
		b.latest = append(b.latest, fmt.Sprint(ev["id"]))
		n := 1
		if c, ok := ev["count"].(float64); ok && c > 1 {
			n = int(c)
		}
		b.total += n
	}
	return b
}
