package streams

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// directGetSet are the headers a direct get adds to the message it
// returns, after the message's own.
var directGetSet = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence"}

// GetMsg reads a message of stream s as s.GetMsg does, trusting only the
// server for where it was stored. A message published with headers a
// direct get sets (a republished copy of one read back, or any sender
// that sets them) keeps them, and a direct get appends the server's own
// after them; the client takes the first, so the message would name the
// sequence, subject and time the sender wrote, and a reader walking a
// subject from the message's sequence on would read it again, forever.
// Read by direct get (the stream allows it), the last value of each of
// those headers is the server's: it is kept and the message's sequence,
// subject and time are taken from it. Read by the stream's get API, the
// sequence, subject and time come from the server's reply and the
// message is returned as read.
func GetMsg(ctx context.Context, s jetstream.Stream, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	m, err := s.GetMsg(ctx, seq, opts...)
	if err != nil {
		return nil, err
	}
	// The client reads directly when its cached info allows it.
	if info := s.CachedInfo(); info == nil || !info.Config.AllowDirect {
		return m, nil
	}
	if len(m.Header.Values(jetstream.SequenceHeader)) < 2 &&
		len(m.Header.Values(jetstream.SubjectHeader)) < 2 &&
		len(m.Header.Values(jetstream.TimeStampHeaer)) < 2 {
		return m, nil
	}
	for _, k := range directGetSet {
		if v := m.Header.Values(k); len(v) > 1 {
			m.Header[k] = v[len(v)-1:]
		}
	}
	h := m.Header.Get(jetstream.SequenceHeader)
	if m.Sequence, err = strconv.ParseUint(h, 10, 64); err != nil {
		return nil, fmt.Errorf("streams: message of %s from %d: sequence header %q: %w", s.CachedInfo().Config.Name, seq, h, err)
	}
	h = m.Header.Get(jetstream.TimeStampHeaer)
	if m.Time, err = time.Parse(time.RFC3339Nano, h); err != nil {
		return nil, fmt.Errorf("streams: message %d of %s: time stamp header %q: %w", m.Sequence, s.CachedInfo().Config.Name, h, err)
	}
	m.Subject = m.Header.Get(jetstream.SubjectHeader)
	return m, nil
}
