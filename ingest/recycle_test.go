package ingest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// Three agents take every opened pull request: one as it comes, one in
// a burst of its own and one behind a throttle that holds all but the
// first for minutes.
const keepBodiesYAML = `name: direct
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: string(event.data.pull_request.number)
---
name: burst
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: string(event.data.pull_request.number)
    debounce: {window: 1s}
---
name: slow
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: string(event.data.pull_request.number)
    throttle: {per_minute: 1, key: event.source}
`

// Webhooks answered while others are read read into the buffers of those
// answered before: every stored event, published, debounced, throttled
// or claim-checked into jl_blobs, still holds its own body byte for byte
// once all are answered.
func TestConcurrentWebhooksKeepTheirBodies(t *testing.T) {
	const (
		n        = 48
		parallel = 16
		maxData  = 29000 // about a quarter of the bodies fit a message
	)
	var defs []string
	for _, d := range bytes.Split([]byte(keepBodiesYAML), []byte("---\n")) {
		defs = append(defs, string(d))
	}
	h := startConfig(t, nil, func(c *ingest.Config) { c.MaxEventSize = maxData }, defs...)
	base := fixture(t, "pull_request/opened.payload.json")
	bodies := make([][]byte, n)
	for i := range bodies {
		b := bytes.ReplaceAll(base, []byte(`"number": 2,`), []byte(`"number": `+strconv.Itoa(100+i)+`,`))
		pad := bytes.Repeat([]byte{byte('a' + i%26)}, 1000*(i%4)*(1+i%3))
		bodies[i] = append([]byte(`{"pad":"`+strconv.Itoa(i)+string(pad)+`",`), b[1:]...)
	}
	errs := make(chan error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for i := range work {
				errs <- deliver(h.url, i, bodies[i])
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	ctx := context.Background()
	in, err := h.js.Stream(ctx, h.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	obs, err := h.js.ObjectStore(ctx, h.names.ObjectBlobs())
	if err != nil {
		t.Fatal(err)
	}
	// stored is the body an event on subject carries: its data, or the
	// object its claim check names.
	stored := func(subject string) ([]byte, error) {
		raw, err := in.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return nil, err
		}
		e, err := events.FromMsg(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
		if err != nil {
			return nil, fmt.Errorf("event on %s: %w", subject, err)
		}
		handle, _ := e.Extensions()[ingest.ExtBlob].(string)
		if handle == "" {
			return e.Data(), nil
		}
		return obs.GetBytes(ctx, handle)
	}
	claimed, held := 0, 0
	for i, body := range bodies {
		session := strconv.Itoa(100 + i)
		if len(body) > maxData {
			claimed++
		}
		got, err := stored(h.subject(t, "direct", session))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("webhook %d: direct's event holds %d bytes (%.40q…), want its %d-byte body (%.40q…): %v", i, len(got), got, len(body), body, err)
		}
		// A burst is on its debounce subject until it fires, then on
		// the session's.
		burst := h.subject(t, "burst", session)
		natstest.WaitFor(t, 10*time.Second, func() error {
			got, err := stored(burst)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("burst of webhook %d not fired yet", i)
			}
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("webhook %d: burst's event holds %d bytes (%.40q…), want its %d-byte body: %v", i, len(got), got, len(body), err)
			}
			return nil
		})
		// The throttle holds all but the first for minutes, each on a
		// subject of its own; one held to the next second moves to the
		// session's subject.
		ref, err := streams.NewSessionRef("slow", session)
		if err != nil {
			t.Fatal(err)
		}
		e := event.New()
		e.SetSource("https://github.com/Codertocat/Hello-World")
		e.SetID("keep-" + strconv.Itoa(i))
		natstest.WaitFor(t, 10*time.Second, func() error {
			for _, sub := range []string{h.names.Throttle(ref, events.MsgID(e)), h.subject(t, "slow", session)} {
				got, err := stored(sub)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("webhook %d: the event on %s holds %d bytes (%.40q…), want its %d-byte body: %v", i, sub, len(got), got, len(body), err)
				}
				if sub != h.subject(t, "slow", session) {
					held++
				}
				return nil
			}
			return fmt.Errorf("throttled event of webhook %d on neither subject", i)
		})
	}
	if held < n/2 {
		t.Fatalf("%d of %d events held by the throttle: the test needs it to hold most", held, n)
	}
	if claimed == 0 || claimed == n {
		t.Fatalf("%d of %d bodies claim-checked: the test needs both kinds", claimed, n)
	}
}

// deliver posts body as signed delivery i and checks the 202.
func deliver(url string, i int, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range githubHeaders("pull_request", "keep-"+strconv.Itoa(i), body) {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %d: %w", i, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook %d: answered %d", i, resp.StatusCode)
	}
	return nil
}
