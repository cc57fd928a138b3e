package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// A message whose sender set the headers a direct get adds (all of them
// or one alone, in the server's form or not) is read where it is stored,
// by direct get and by the stream's get API, through an API prefix and
// with a client trace too, though the client could not parse what the
// sender wrote: a walk of its subject from each message's sequence on
// reads every message once and ends.
func TestGetMsgTrustsTheServerOverTheMessage(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv.ClientURL())
	stamp := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC).Format(time.RFC3339Nano)
	forged := map[string]nats.Header{
		"all":             {jetstream.StreamHeader: {"S"}, jetstream.SubjectHeader: {"x.old"}, jetstream.SequenceHeader: {"1"}, jetstream.TimeStampHeaer: {stamp}},
		"sequence":        {jetstream.SequenceHeader: {"1"}},
		"sequence padded": {jetstream.SequenceHeader: {"01"}},
		"sequence twice":  {jetstream.SequenceHeader: {"1", "2"}},
		"subject":         {jetstream.SubjectHeader: {"x.old"}},
		"time stamp":      {jetstream.TimeStampHeaer: {stamp}},
		"lower case":      {"nats-sequence": {"1"}, "NATS-SUBJECT": {"x.old"}},
		"sequence unread": {jetstream.SequenceHeader: {"x"}},
		"sequence empty":  {jetstream.SequenceHeader: {""}},
		"stamp unread":    {jetstream.TimeStampHeaer: {"yesterday"}},
		"subject empty":   {jetstream.SubjectHeader: {""}},
		"status":          {"Status": {"404"}},
		"status 503":      {"Status": {"503"}},
		"status 408":      {"Status": {"408"}},
		"status 100":      {"Status": {"100"}, "Description": {"Idle Heartbeat"}},
		"status 409":      {"Status": {"409"}, "Description": {"Consumer Deleted"}},
	}
	for cname, js := range clients(t, nc) {
		for _, direct := range []bool{true, false} {
			name := fmt.Sprintf("D%s%t", cname, direct)
			s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowDirect: direct})
			if err != nil {
				t.Fatalf("create stream %s: %v", name, err)
			}
			for what, h := range forged {
				t.Run(fmt.Sprintf("%s, direct %t, %s", cname, direct, what), func(t *testing.T) {
					subj := name + "." + fmt.Sprint(len(what)) + "." + fmt.Sprint(time.Now().UnixNano())
					var want []uint64
					var stored []time.Time
					for i := range 3 {
						m := nats.NewMsg(subj)
						if i == 1 {
							for k, v := range h {
								m.Header[k] = v
							}
						}
						ack, err := js.PublishMsg(ctx, m)
						if err != nil {
							t.Fatalf("publish %d on %s: %v", i, subj, err)
						}
						want = append(want, ack.Sequence)
						raw, err := s.GetMsg(ctx, ack.Sequence)
						if err != nil && i != 1 {
							t.Fatalf("read %d: %v", ack.Sequence, err)
						}
						if raw != nil {
							stored = append(stored, raw.Time)
						} else {
							stored = append(stored, time.Time{})
						}
					}
					var from uint64
					for i, seq := range want {
						m, err := streams.GetMsg(ctx, js, s, from+1, subj)
						if err != nil {
							t.Fatalf("message %d on %s after %d: %v", i, subj, from, err)
						}
						if m.Sequence != seq || m.Subject != subj {
							t.Fatalf("message %d on %s after %d read as %d on %s, want %d (headers %v)", i, subj, from, m.Sequence, m.Subject, seq, m.Header)
						}
						if m.Time.Year() == 2001 {
							t.Fatalf("message %d on %s read with the sender's time stamp %s", seq, subj, m.Time)
						}
						if i != 1 && !m.Time.Equal(stored[i]) {
							t.Fatalf("message %d read at %s, stored at %s", seq, m.Time, stored[i])
						}
						from = m.Sequence
					}
					if _, err := streams.GetMsg(ctx, js, s, from+1, subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
						t.Fatalf("after the last message %d on %s: %v, want %v", from, subj, err, jetstream.ErrMsgNotFound)
					}
				})
			}
		}
	}
}

// clients are the ways a client reaches the API: plain, through an API
// prefix and with a client trace (the client's own direct get would read
// the sender's headers in each).
func clients(t *testing.T, nc *nats.Conn) map[string]jetstream.JetStream {
	t.Helper()
	plain, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prefixed, err := jetstream.NewWithAPIPrefix(nc, "$JS.API")
	if err != nil {
		t.Fatal(err)
	}
	var traced int
	trace := &jetstream.ClientTrace{RequestSent: func(string, []byte) { traced++ }}
	tracing, err := jetstream.New(nc, jetstream.WithClientTrace(trace))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if traced == 0 {
			t.Errorf("no request told the client trace")
		}
	})
	return map[string]jetstream.JetStream{"plain": plain, "prefix": prefixed, "trace": tracing}
}

// A message without data whose sender set Status: 503 reads, by direct
// get, as no responders to the client: GetMsg and GetLastMsg read it by
// the stream's get API instead, through every client, with its headers
// as stored; a subject without messages, or whose message was deleted,
// is still not found, and a stream that is gone says so.
func TestGetMsgReadsAStatusByTheGetAPI(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv.ClientURL())
	for cname, js := range clients(t, nc) {
		for _, direct := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, direct %t", cname, direct), func(t *testing.T) {
				name := fmt.Sprintf("S%s%t", cname, direct)
				s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowDirect: direct})
				if err != nil {
					t.Fatalf("create stream %s: %v", name, err)
				}
				subj := name + ".a"
				before, err := js.Publish(ctx, subj, []byte("before"))
				if err != nil {
					t.Fatal(err)
				}
				m := nats.NewMsg(subj)
				m.Header.Set("Status", "503")
				m.Header.Set(jetstream.SequenceHeader, "1")
				forged, err := js.PublishMsg(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				if direct {
					// What the fix is for: the client's own read fails.
					if _, err := s.GetMsg(ctx, forged.Sequence); !errors.Is(err, nats.ErrNoResponders) {
						t.Fatalf("client's read of %d: %v, want %v", forged.Sequence, err, nats.ErrNoResponders)
					}
				}
				for what, get := range map[string]func() (*jetstream.RawStreamMsg, error){
					"next": func() (*jetstream.RawStreamMsg, error) { return streams.GetMsg(ctx, js, s, before.Sequence+1, subj) },
					"at":   func() (*jetstream.RawStreamMsg, error) { return streams.GetMsg(ctx, js, s, forged.Sequence, "") },
					"last": func() (*jetstream.RawStreamMsg, error) { return streams.GetLastMsg(ctx, js, s, subj) },
				} {
					got, err := get()
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if got.Sequence != forged.Sequence || got.Subject != subj || got.Header.Get("Status") != "503" || len(got.Data) != 0 || got.Time.IsZero() {
						t.Fatalf("%s: read %d on %s at %s, headers %v, data %q; want %d on %s with its Status", what, got.Sequence, got.Subject, got.Time, got.Header, got.Data, forged.Sequence, subj)
					}
				}
				if _, err := streams.GetMsg(ctx, js, s, forged.Sequence+1, subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("after %d: %v, want %v", forged.Sequence, err, jetstream.ErrMsgNotFound)
				}
				if _, err := streams.GetLastMsg(ctx, js, s, name+".none"); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("last on a subject without messages: %v, want %v", err, jetstream.ErrMsgNotFound)
				}
				if err := s.DeleteMsg(ctx, forged.Sequence); err != nil {
					t.Fatal(err)
				}
				if _, err := streams.GetMsg(ctx, js, s, forged.Sequence, ""); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("deleted %d: %v, want %v", forged.Sequence, err, jetstream.ErrMsgNotFound)
				}
				if _, err := streams.GetMsg(ctx, js, s, before.Sequence+1, subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("after %d, the next deleted: %v, want %v", before.Sequence, err, jetstream.ErrMsgNotFound)
				}
				if got, err := streams.GetLastMsg(ctx, js, s, subj); err != nil || got.Sequence != before.Sequence {
					t.Fatalf("last on %s after the delete: %v, %v; want %d", subj, got, err, before.Sequence)
				}
				if err := js.DeleteStream(ctx, name); err != nil {
					t.Fatal(err)
				}
				if _, err := streams.GetMsg(ctx, js, s, 1, subj); !errors.Is(err, jetstream.ErrStreamNotFound) {
					t.Fatalf("read of a deleted stream: %v, want %v", err, jetstream.ErrStreamNotFound)
				}
			})
		}
	}
}
