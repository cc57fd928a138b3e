package api_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dlq"
)

// TestDLQFiltersWithSequences names a letter by its sequence together
// with a filter it does not pass (another reason, a later since, another
// agent): a filter is never taken and then ignored, so the request is
// refused with 400 and nothing is redriven.
func TestDLQFiltersWithSequences(t *testing.T) {
	h := start(t, api.Config{})
	ref := ref(t, "demo", "s1")
	m, err := dlq.New(h.names, dlq.NoSession, "cancel of demo/s1: no session", h.names.Ctl(ref), 7,
		nats.Header{"Ce-Id": []string{"c-1"}, "Ce-Type": []string{"dev.jetloop.control"}}, []byte(`{"verb":"cancel"}`))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := h.js.PublishMsg(ctx(t), m, jetstream.WithExpectStream(h.names.StreamDLQ()))
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []api.DLQRequest{
		{Action: api.DLQRedrive, Seqs: []uint64{ack.Sequence}, Reason: string(dlq.RuleError)},
		{Action: api.DLQRedrive, Seqs: []uint64{ack.Sequence}, Since: time.Now().Add(time.Hour)},
		{Action: api.DLQRedrive, Seqs: []uint64{ack.Sequence}, Agent: "other"},
		{Action: api.DLQShow, Seqs: []uint64{ack.Sequence}, Reason: string(dlq.RuleError)},
	} {
		resp, err := h.client.DLQ(ctx(t), req)
		var e *api.Error
		if !errors.As(err, &e) || e.Code != http.StatusBadRequest || len(resp.Redriven) != 0 {
			t.Errorf("%s %v with reason %q, since %v, agent %q: %+v, %v; want 400", req.Action, req.Seqs, req.Reason, req.Since, req.Agent, resp.Redriven, err)
		}
	}
	in, err := h.js.Stream(ctx(t), h.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.GetLastMsgForSubject(ctx(t), h.names.Ctl(ref)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the letter went back to %s: %v", h.names.Ctl(ref), err)
	}
}
