package worker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// serverSet are the headers a direct get adds to the message it returns.
var serverSet = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence"}

// getMsg reads a message of stream s as GetMsg does, trusting only the
// server for where it was stored. A message published with headers a
// direct get sets (a republished copy of one read back) keeps them, and
// a direct get appends its own after them; the client takes the first,
// so the message would name the sequence, subject and time of the one
// it was copied from, and a session reading its next event after that
// sequence would read this one again, forever. The server's values are
// kept, the stale ones dropped.
func getMsg(ctx context.Context, s jetstream.Stream, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	m, err := s.GetMsg(ctx, seq, opts...)
	if err != nil {
		return nil, err
	}
	seqs := m.Header.Values(jetstream.SequenceHeader)
	if len(seqs) < 2 || seqs[0] != strconv.FormatUint(m.Sequence, 10) {
		// One value (the server's or, read without direct get, the
		// message's own beside a sequence from the reply): as read.
		return m, nil
	}
	for _, k := range serverSet {
		if v := m.Header.Values(k); len(v) > 1 {
			m.Header[k] = v[len(v)-1:]
		}
	}
	if m.Sequence, err = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64); err != nil {
		return nil, fmt.Errorf("worker: message after %d: sequence header %q: %w", seq, m.Header.Get(jetstream.SequenceHeader), err)
	}
	if m.Time, err = time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer)); err != nil {
		return nil, fmt.Errorf("worker: message %d: time stamp header %q: %w", m.Sequence, m.Header.Get(jetstream.TimeStampHeaer), err)
	}
	m.Subject = m.Header.Get(jetstream.SubjectHeader)
	return m, nil
}
