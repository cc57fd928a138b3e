package worker_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// Retention asks whether a session has input left by reading the last
// event and control message on its subjects: one whose sender set the
// sequence a direct get adds to one the session consumed, or a Status
// header and no data, is still input left, not a session free to remove
// with its input, nor a read that fails on every pass.
func TestRetentionReadsTheLastInputWhereItIsStored(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "one"})}
	w := e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	for _, tt := range []struct {
		name   string
		ctl    bool
		header func(consumed uint64) nats.Header
	}{
		{"event naming a consumed sequence", false, func(c uint64) nats.Header {
			return nats.Header{jetstream.SequenceHeader: {strconv.FormatUint(c, 10)}}
		}},
		{"event with a status", false, func(uint64) nats.Header { return nats.Header{"Status": {"503"}} }},
		{"control naming a consumed sequence", true, func(c uint64) nats.Header {
			return nats.Header{jetstream.SequenceHeader: {strconv.FormatUint(c, 10)}}
		}},
		{"control with a status", true, func(uint64) nats.Header { return nats.Header{"Status": {"503"}} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// An agent no worker consumes: its input stays unconsumed.
			ref := e.ref(t, "idle", tt.name)
			subj := e.names.In(ref)
			if tt.ctl {
				subj = e.names.Ctl(ref)
			}
			var consumed uint64
			for range 2 {
				ack, err := e.js.Publish(ctx, subj, []byte("consumed"))
				if err != nil {
					t.Fatal(err)
				}
				consumed = ack.Sequence
			}
			m := nats.NewMsg(subj)
			m.Header = tt.header(consumed - 1)
			left, err := e.js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			var st record.State
			if tt.ctl {
				st.CtlSeq = consumed
			} else {
				st.InSeq = consumed
			}
			got, err := w.InputLeft(ctx, ref, st)
			if err != nil || !got {
				t.Fatalf("input left after %d with %d on %s: %t, %v; want true", consumed, left.Sequence, subj, got, err)
			}
		})
	}
}
