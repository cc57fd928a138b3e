package api_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// ingestFor runs an ingest pipeline whose admission follows the stored
// definitions, as `jetloop dev` runs one beside the API, and returns its
// way in for requests and its rules.
func ingestFor(tb testing.TB, js jetstream.JetStream, names streams.Names) (api.Requests, *admission.Rules) {
	tb.Helper()
	ctx := context.Background()
	store, err := policies.NewStore(ctx, js, names)
	if err != nil {
		tb.Fatal(err)
	}
	rules := admission.NewRules()
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = rules.Watch(wctx, store, slog.New(slog.DiscardHandler)) })
	tb.Cleanup(func() { stop(); wg.Wait() })
	select {
	case <-rules.Synced():
	case <-time.After(30 * time.Second):
		tb.Fatal("definitions not loaded")
	}
	adm, err := admission.New(ctx, js, rules, admission.Config{Names: names})
	if err != nil {
		tb.Fatal(err)
	}
	dd, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := ingest.New(ingest.Config{Names: names}, js, dd, adm)
	if err != nil {
		tb.Fatal(err)
	}
	return srv.Request, rules
}

// send takes the ingest's path: a request the agent does not take is
// refused with 422 naming why, and nothing reaches the session.
func TestSendIsAdmittedLikeHTTP(t *testing.T) {
	h := start(t, api.Config{})
	y := "name: closed\nmodel: {provider: scripted, script: [{text: hi}]}\nrequests: off\n"
	if _, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "closed.yaml", Content: y}}}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := h.rules.Agent("closed"); !ok {
			return errors.New("admission has no closed yet")
		}
		return nil
	})
	_, err := h.client.Send(ctx(t), api.SendRequest{Agent: "closed", Session: "s1", Text: "hello"})
	if !errors.Is(err, api.ErrNotAdmitted) || !strings.Contains(err.Error(), "requests: off") {
		t.Fatalf("send to an agent that takes no requests: %v", err)
	}
	if _, err := h.client.Send(ctx(t), api.SendRequest{Agent: "nobody", Session: "s1", Text: "hello"}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("send to an unknown agent: %v", err)
	}
	h.applyDemo(t)
	sent, err := h.client.Send(ctx(t), api.SendRequest{Agent: "demo", Session: "s1", Text: "hello", ID: "same"})
	if err != nil || sent.Seq == 0 || sent.ID != "same" || sent.Duplicate {
		t.Fatalf("send: %+v %v", sent, err)
	}
	again, err := h.client.Send(ctx(t), api.SendRequest{Agent: "demo", Session: "s1", Text: "hello", ID: "same"})
	if err != nil || !again.Duplicate || again.Seq != sent.Seq {
		t.Fatalf("send again: %+v %v", again, err)
	}
	if _, err := h.client.Send(ctx(t), api.SendRequest{Agent: "demo", Session: "s1", Text: "other", ID: "same"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("the id of another request: %v", err)
	}
}
