package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directGetSet are the headers a direct get adds to the message it
// returns, after the message's own.
var directGetSet = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence"}

// GetMsg reads the first message of stream s on subject from sequence
// seq on, as s.GetMsg with jetstream.WithGetMsgSubject does, trusting
// only the server for where it was stored. A message published with
// headers a direct get sets (a republished copy of one read back, or any
// sender that sets them) keeps them, and a direct get appends the
// server's own after them; the client reads the first, so the message
// would name the sequence, subject and time the sender wrote (and one
// the client cannot parse fails the read), and a reader walking a
// subject from each message's sequence on would read the same message
// again, forever. Read by direct get, the last value of each of those
// headers is the server's: it is kept, and the message's sequence,
// subject and time are taken from it. Read by the stream's get API (the
// stream does not allow direct gets), the sequence, subject and time
// come from the server's reply and the message is returned as read.
// Through an API prefix, a domain or a client trace the client's own
// direct get is used, and a sender's value it cannot parse fails the
// read.
func GetMsg(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	info := s.CachedInfo()
	o := js.Options()
	// The client reads directly when its cached info allows it.
	allowDirect := info != nil && info.Config.AllowDirect
	if !allowDirect || o.APIPrefix != "" || o.Domain != "" || o.ClientTrace != nil {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil || !allowDirect {
			return m, err
		}
		return lastValues(m)
	}
	name := info.Config.Name
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq,omitempty"`
		NextFor string `json:"next_by_subj,omitempty"`
	}{seq, subject})
	if err != nil {
		return nil, fmt.Errorf("streams: direct get of %s on %s from %d: %w", name, subject, seq, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.DefaultTimeout)
		defer cancel()
	}
	r, err := js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+name, req)
	if err != nil {
		return nil, fmt.Errorf("streams: direct get of %s on %s from %d: %w", name, subject, seq, err)
	}
	// A status (no message) has none of the server's headers.
	if len(r.Header.Values(jetstream.SequenceHeader)) == 0 {
		switch st := r.Header.Get("Status"); st {
		case "404":
			return nil, jetstream.ErrMsgNotFound
		case "":
			return nil, fmt.Errorf("streams: direct get of %s on %s from %d: no sequence header in the reply", name, subject, seq)
		default:
			return nil, fmt.Errorf("streams: direct get of %s on %s from %d: status %s %s", name, subject, seq, st, r.Header.Get("Description"))
		}
	}
	return direct(r.Header, r.Data, name)
}

// lastValues is m, read by s.GetMsg by direct get, with the server's
// values where a header holds the message's own as well.
func lastValues(m *jetstream.RawStreamMsg) (*jetstream.RawStreamMsg, error) {
	if len(m.Header.Values(jetstream.SequenceHeader)) < 2 &&
		len(m.Header.Values(jetstream.SubjectHeader)) < 2 &&
		len(m.Header.Values(jetstream.TimeStampHeaer)) < 2 {
		return m, nil
	}
	return direct(m.Header, m.Data, m.Header.Get(jetstream.StreamHeader))
}

// direct is the message a direct get of stream returned with header h
// and data: the last value of each header the server sets is its own.
func direct(h nats.Header, data []byte, stream string) (*jetstream.RawStreamMsg, error) {
	for _, k := range directGetSet {
		if v := h.Values(k); len(v) > 1 {
			h[k] = v[len(v)-1:]
		}
	}
	m := &jetstream.RawStreamMsg{Subject: h.Get(jetstream.SubjectHeader), Header: h, Data: data}
	v := h.Get(jetstream.SequenceHeader)
	var err error
	if m.Sequence, err = strconv.ParseUint(v, 10, 64); err != nil {
		return nil, fmt.Errorf("streams: message of %s: sequence header %q: %w", stream, v, err)
	}
	v = h.Get(jetstream.TimeStampHeaer)
	if m.Time, err = time.Parse(time.RFC3339Nano, v); err != nil {
		return nil, fmt.Errorf("streams: message %d of %s: time stamp header %q: %w", m.Sequence, stream, v, err)
	}
	if m.Subject == "" {
		return nil, fmt.Errorf("streams: message %d of %s: %w", m.Sequence, stream, errors.New("no subject header"))
	}
	return m, nil
}
