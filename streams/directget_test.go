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
// by direct get and by the stream's get API, though the client could not
// parse what the sender wrote: a walk of its subject from each message's
// sequence on reads every message once and ends.
func TestGetMsgTrustsTheServerOverTheMessage(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
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
	}
	for _, direct := range []bool{true, false} {
		name := fmt.Sprintf("D%t", direct)
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowDirect: direct})
		if err != nil {
			t.Fatalf("create stream %s: %v", name, err)
		}
		for what, h := range forged {
			t.Run(fmt.Sprintf("direct %t, %s", direct, what), func(t *testing.T) {
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
