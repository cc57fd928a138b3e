package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dlq"
)

// badSubjects are subjects of JL_IN that name no session: one whose
// session token decodes to a control character, one whose session token
// does not decode.
var badSubjects = []string{"jl.in.demo.=00", "jl.in.demo.=G1"}

// deadLetter stores a letter of reason on JL_DLQ as the worker does, its
// event claiming the session demo/s1, and returns its sequence.
func (h *harness) deadLetter(t *testing.T, reason dlq.Reason, subject string) uint64 {
	t.Helper()
	hdr := nats.Header{"Ce-Id": []string{"e-" + subject}, "Ce-Type": []string{"dev.jetloop.request"},
		"Ce-Jlagent": []string{"demo"}, "Ce-Jlsession": []string{"s1"}}
	m, err := dlq.New(h.names, reason, "cannot use "+subject, subject, 3, hdr, []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := h.js.PublishMsg(ctx(t), m, jetstream.WithExpectStream(h.names.StreamDLQ()))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// httpAPI serves h's HTTP routes on loopback until the test ends and
// returns a function that sends one request and decodes its answer.
func httpAPI(t *testing.T, h *harness) func(method, path string) (int, []byte) {
	t.Helper()
	mux := http.NewServeMux()
	h.svc.MountHTTP(mux, api.HTTPConfig{Token: "t0ken"})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return func(method, path string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx(t), method, srv.URL+path, bytes.NewReader(nil))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b.Bytes()
	}
}

// TestRedriveOfALetterWhoseSubjectNamesNoSession: a bad_subject letter
// has nowhere to go back to. Named by its sequence, its redrive is
// refused as a conflict that says so, not failed as the service's error;
// selected by a filter, it is left and reported with why, and the
// letters after it are redriven.
func TestRedriveOfALetterWhoseSubjectNamesNoSession(t *testing.T) {
	h := start(t, api.Config{})
	do := httpAPI(t, h)
	var bad []uint64
	for _, subj := range badSubjects {
		bad = append(bad, h.deadLetter(t, dlq.BadSubject, subj))
	}
	good := ref(t, "demo", "s1")
	goodSeq := h.deadLetter(t, dlq.NoSession, h.names.Ctl(good))

	for i, seq := range bad {
		code, body := do(http.MethodPost, "/v1/dlq/"+strconv.FormatUint(seq, 10)+"/redrive")
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("redrive of the letter of %s: %d %s", badSubjects[i], code, body)
		}
		if code != http.StatusConflict || e.Code != http.StatusConflict || !strings.Contains(e.Message, "cannot be redriven") || !strings.Contains(e.Message, "names no session") {
			t.Errorf("redrive of the letter of %s: %d %s; want 409 saying it cannot be redriven, its subject naming no session", badSubjects[i], code, body)
		}
	}
	_, err := h.client.DLQ(ctx(t), api.DLQRequest{Action: api.DLQRedrive, Seqs: bad[:1]})
	if !errors.Is(err, api.ErrConflict) {
		t.Errorf("redrive of letter %d over NATS: %v, want a conflict", bad[0], err)
	}

	resp, err := h.client.DLQ(ctx(t), api.DLQRequest{Action: api.DLQRedrive, Reason: string(dlq.BadSubject)})
	if err != nil || len(resp.Redriven) != 0 || len(resp.NotRedriven) != len(bad) {
		t.Fatalf("redrive by reason %s: %+v, %v; want %d letters not redriven", dlq.BadSubject, resp, err, len(bad))
	}

	resp, err = h.client.DLQ(ctx(t), api.DLQRequest{Action: api.DLQRedrive, Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatalf("redrive by since: %v", err)
	}
	if len(resp.Redriven) != 1 || resp.Redriven[0].Letter != goodSeq || resp.Redriven[0].Subject != h.names.Ctl(good) {
		t.Errorf("redrive by since redrove %+v, want letter %d back on %s", resp.Redriven, goodSeq, h.names.Ctl(good))
	}
	if len(resp.NotRedriven) != len(bad) {
		t.Fatalf("redrive by since: not redriven %+v, want letters %v", resp.NotRedriven, bad)
	}
	for i, n := range resp.NotRedriven {
		if n.Letter != bad[i] || !strings.Contains(n.Why, "names no session") {
			t.Errorf("not redriven %+v, want letter %d saying its subject names no session", n, bad[i])
		}
	}
	st, err := h.js.Stream(ctx(t), h.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLastMsgForSubject(ctx(t), h.names.Ctl(good)); err != nil {
		t.Fatalf("letter %d is not back on %s: %v", goodSeq, h.names.Ctl(good), err)
	}
}

// TestLetterWhoseSubjectNamesNoSessionIsNobodys: a bad_subject letter is
// listed under no session, whatever session its event claims, so a
// listing by agent does not show it to that agent (nor a redrive by
// agent select it); show keeps the claim in its headers. An event
// admission could not decide, which was on no subject, is still listed
// under the session its extensions name.
func TestLetterWhoseSubjectNamesNoSessionIsNobodys(t *testing.T) {
	h := start(t, api.Config{})
	do := httpAPI(t, h)
	bad := h.deadLetter(t, dlq.BadSubject, badSubjects[0])
	subj, err := h.names.DLQ(string(dlq.RuleError))
	if err != nil {
		t.Fatal(err)
	}
	adm := &nats.Msg{Subject: subj, Header: nats.Header{"Ce-Id": []string{"r-1"}, "Ce-Jlagent": []string{"demo"}, "Ce-Jlsession": []string{"s1"},
		dlq.RuleHeader: []string{"demo/request"}, dlq.HeaderReason: []string{string(dlq.RuleError)}}, Data: []byte(`{}`)}
	ack, err := h.js.PublishMsg(ctx(t), adm, jetstream.WithExpectStream(h.names.StreamDLQ()))
	if err != nil {
		t.Fatal(err)
	}

	code, body := do(http.MethodGet, "/v1/dlq?agent=demo")
	var ls api.DLQResponse
	if err := json.Unmarshal(body, &ls); code != http.StatusOK || err != nil {
		t.Fatalf("list by agent: %d %s", code, body)
	}
	if len(ls.Letters) != 1 || ls.Letters[0].Seq != ack.Sequence || ls.Letters[0].Agent != "demo" || ls.Letters[0].Session != "s1" {
		t.Errorf("letters of demo: %+v, want letter %d of admission only, for demo/s1", ls.Letters, ack.Sequence)
	}
	code, body = do(http.MethodGet, "/v1/dlq/"+strconv.FormatUint(bad, 10))
	var shown api.DLQResponse
	if err := json.Unmarshal(body, &shown); code != http.StatusOK || err != nil || len(shown.Letters) != 1 {
		t.Fatalf("show %d: %d %s", bad, code, body)
	}
	l := shown.Letters[0]
	if l.Agent != "" || l.Session != "" || l.Subject != badSubjects[0] || l.Header.Get("Ce-Jlsession") != "s1" {
		t.Errorf("letter of %s: agent %q, session %q, subject %q, headers %v; want no session, the claim in its headers", badSubjects[0], l.Agent, l.Session, l.Subject, l.Header)
	}
	resp, err := h.client.DLQ(ctx(t), api.DLQRequest{Action: api.DLQRedrive, Agent: "demo", Reason: string(dlq.BadSubject)})
	if err != nil || len(resp.Redriven) != 0 || len(resp.NotRedriven) != 0 {
		t.Errorf("redrive of demo's bad_subject letters: %+v, %v; want none selected", resp, err)
	}
}
