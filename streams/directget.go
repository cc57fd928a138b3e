package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directGetSet are the headers a direct get adds to the message it
// returns, after the message's own.
var directGetSet = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence"}

// GetMsg reads the first message of stream s on subject from sequence
// seq on, as s.GetMsg with jetstream.WithGetMsgSubject does (with subject
// empty: the message at seq, as s.GetMsg does), trusting only the server
// for where it was stored. A message published with headers a direct get
// sets (a republished copy of one read back, or any sender that sets
// them) keeps them, and a direct get appends the server's own after
// them; the client reads the first, so the message would name the
// sequence, subject and time the sender wrote (and one the client cannot
// parse fails the read), and a reader walking a subject from each
// message's sequence on would read the same message again, forever. Read
// by direct get, the last value of each of those headers is the server's:
// it is kept, and the message's sequence, subject and time are taken from
// it.
//
// A message without data whose sender set a Status header reads, by
// direct get, as the status the server answers with when it has no
// message: the client takes Status: 503 as no responders, before any
// reader sees the reply. A direct get is therefore answered as no
// message only when the reply has none of the server's headers, and one
// the client refuses as no responders is read again by the stream's get
// API, whose reply carries the stored headers inside its JSON (a stream
// without responders answers that too, with its own error). Read by the
// stream's get API (the stream does not allow direct gets, or as that
// second read), the sequence, subject and time come from the server's
// reply and the message is returned as stored.
func GetMsg(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	return get(ctx, js, s, getRequest{Seq: seq, NextFor: subject})
}

// GetLastMsg reads the last message of stream s on subject, as
// s.GetLastMsgForSubject does, trusting only the server for where it was
// stored and reading a message with a Status header as a message: see
// GetMsg.
func GetLastMsg(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	return get(ctx, js, s, getRequest{LastFor: subject})
}

// getRequest is the body of a direct get and of the stream's get API.
type getRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// String names what r reads, for errors.
func (r getRequest) String() string {
	switch {
	case r.LastFor != "":
		return "last on " + r.LastFor
	case r.NextFor != "":
		return fmt.Sprintf("on %s from %d", r.NextFor, r.Seq)
	default:
		return fmt.Sprintf("at %d", r.Seq)
	}
}

// get reads what r names from s, by direct get where the stream allows
// it, else (or when the client took the direct get's reply for no
// responders) by the stream's get API.
func get(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, r getRequest) (*jetstream.RawStreamMsg, error) {
	o := js.Options()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.DefaultTimeout)
		defer cancel()
	}
	info := s.CachedInfo()
	if info == nil {
		var err error
		if info, err = s.Info(ctx); err != nil {
			return nil, fmt.Errorf("streams: get %s: %w", r, err)
		}
	}
	name := info.Config.Name
	prefix := apiPrefix(o)
	if info.Config.AllowDirect {
		m, err := directGet(ctx, js, prefix, name, r)
		if !errors.Is(err, nats.ErrNoResponders) {
			return m, err
		}
	}
	return apiGet(ctx, js, prefix, name, r)
}

// apiPrefix is the prefix of the JetStream API subjects js sends to, as
// the client makes it.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	default:
		return jetstream.DefaultAPIPrefix
	}
}

// request sends one API request of js, telling its client trace.
func request(ctx context.Context, js jetstream.JetStream, subj string, body []byte) (*nats.Msg, error) {
	trace := js.Options().ClientTrace
	if trace != nil && trace.RequestSent != nil {
		trace.RequestSent(subj, body)
	}
	m, err := js.Conn().RequestWithContext(ctx, subj, body)
	if err == nil && trace != nil && trace.ResponseReceived != nil {
		trace.ResponseReceived(subj, m.Data, m.Header)
	}
	return m, err
}

// directGet reads what r names by direct get of stream name.
func directGet(ctx context.Context, js jetstream.JetStream, prefix, name string, r getRequest) (*jetstream.RawStreamMsg, error) {
	subj := prefix + "DIRECT.GET." + name
	var body []byte
	if r.LastFor != "" {
		subj += "." + r.LastFor
	} else {
		var err error
		if body, err = json.Marshal(r); err != nil {
			return nil, fmt.Errorf("streams: direct get of %s %s: %w", name, r, err)
		}
	}
	reply, err := request(ctx, js, subj, body)
	if err != nil {
		return nil, fmt.Errorf("streams: direct get of %s %s: %w", name, r, err)
	}
	// A status (no message) has none of the server's headers.
	if len(reply.Header.Values(jetstream.SequenceHeader)) == 0 {
		switch st := reply.Header.Get("Status"); st {
		case "404":
			return nil, jetstream.ErrMsgNotFound
		case "":
			return nil, fmt.Errorf("streams: direct get of %s %s: no sequence header in the reply", name, r)
		default:
			return nil, fmt.Errorf("streams: direct get of %s %s: status %s %s", name, r, st, reply.Header.Get("Description"))
		}
	}
	return direct(reply.Header, reply.Data, name)
}

// apiGet reads what r names by the get API of stream name: the reply is
// JSON, the stored headers in it as stored.
func apiGet(ctx context.Context, js jetstream.JetStream, prefix, name string, r getRequest) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("streams: get of %s %s: %w", name, r, err)
	}
	reply, err := request(ctx, js, prefix+"STREAM.MSG.GET."+name, body)
	if err != nil {
		return nil, fmt.Errorf("streams: get of %s %s: %w", name, r, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs,omitempty"`
			Data     []byte    `json:"data,omitempty"`
			Time     time.Time `json:"time"`
		} `json:"message,omitempty"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("streams: get of %s %s: reply %q: %w", name, r, reply.Data, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("streams: get of %s %s: %w", name, r, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("streams: get of %s %s: %w", name, r, jetstream.ErrInvalidJetStreamResponse)
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("streams: message %d of %s: headers: %w", m.Sequence, name, err)
		}
	}
	return m, nil
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
