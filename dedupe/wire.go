package dedupe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// The lookup and the create are the bucket's two operations of every
// event, so the store makes them as plain requests on the bucket's stream
// rather than through the KV API: the same server operations (a direct
// get of the key's last message; a publish to the key expecting no last
// message), without the API's per-call key check, options and request
// building. Every answer is read as jetstream's KeyValue reads it (get
// and Create in its kv.go), so Seen, Record and Claim answer and fail as
// they would through it; the tests compare the two on real servers.
//
// The wire form is used only where the KV API would take the same path:
// jetstream's own KeyValue (not a wrapper) of a bucket that allows direct
// gets and mirrors no other, reached without an API prefix or domain or
// client trace. Otherwise the store goes through the KV API.

// Header names and values the bucket's messages and answers carry (kv.go
// and message.go of jetstream, which does not export all of them).
const (
	hdrStatus        = "Status"
	hdrDescription   = "Description"
	hdrKVOperation   = "KV-Operation"
	hdrExpectLastSeq = "Nats-Expected-Last-Subject-Sequence"
	opDelete         = "DEL"
	opPurge          = "PURGE"
	statusNotFound   = "404"
	directGetPrefix  = "$JS.API.DIRECT.GET."
)

// wire is what the store needs to speak to the bucket's stream itself.
type wire struct {
	nc *nats.Conn
	// getPre is the direct get subject of the stream's last message of a
	// key, less the key.
	getPre string
	// putPre is the subject of a key, less the key.
	putPre string
	// timeout bounds a request whose context has no deadline, as the
	// JetStream context's DefaultTimeout does.
	timeout time.Duration
	// ttl is the Nats-TTL header of a create (KeyTTL).
	ttl string
}

// ownKV reports whether kv is jetstream's own KeyValue, whose Get and
// Create are the server operations alone. Another (a wrapper that traces,
// counts or fails them) is called as it is.
func ownKV(kv jetstream.KeyValue) bool {
	t := reflect.TypeOf(kv)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == reflect.TypeFor[jetstream.KeyValueConfig]().PkgPath()
}

// newWire returns the wire form of bucket's operations, or nil where the
// KV API would not take the direct path (see above).
func newWire(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (*wire, error) {
	o := js.Options()
	if o.APIPrefix != "" || o.Domain != "" || o.ClientTrace != nil {
		return nil, nil
	}
	stream, err := js.Stream(ctx, streams.KVStream(bucket))
	if err != nil {
		return nil, fmt.Errorf("dedupe: open the stream of bucket %s: %w", bucket, err)
	}
	cfg := stream.CachedInfo().Config
	if !cfg.AllowDirect || cfg.Mirror != nil {
		return nil, nil
	}
	w := &wire{
		nc:      js.Conn(),
		getPre:  directGetPrefix + cfg.Name + ".$KV." + bucket + ".",
		putPre:  "$KV." + bucket + ".",
		timeout: o.DefaultTimeout,
	}
	if ttl > 0 {
		w.ttl = ttl.String()
	}
	return w, nil
}

// withTimeout is jetstream's wrapContextWithoutDeadline.
func (w *wire) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, w.timeout)
}

// entry is a key's last message as jetstream's kv.get returns it.
type entry struct {
	value    []byte
	revision uint64
	created  time.Time
}

// get is jetstream's KeyValue.Get of key, which must be valid (names
// builds it): the direct get of the key's last message. A key whose last
// message is a delete or purge, or a marker the server left where a
// message expired or was removed, is ErrKeyNotFound; deleted then also
// holds that message's revision (what Create updates on).
func (w *wire) get(ctx context.Context, key string) (e entry, deleted bool, err error) {
	ctx, cancel := w.withTimeout(ctx)
	defer cancel()
	r, err := w.nc.RequestWithContext(ctx, w.getPre+key, nil)
	if err != nil {
		return entry{}, false, err
	}
	// convertDirectGetMsgResponseToMsg: a status without a payload.
	if len(r.Data) == 0 {
		if val := r.Header.Get(hdrStatus); val != "" {
			if val == statusNotFound {
				return entry{}, false, jetstream.ErrKeyNotFound
			}
			desc := r.Header.Get(hdrDescription)
			if desc == "" {
				desc = "unable to get message"
			}
			return entry{}, false, fmt.Errorf("nats: %s", desc)
		}
	}
	if len(r.Header) == 0 {
		return entry{}, false, errors.New("nats: response should have headers")
	}
	if r.Header.Get(jetstream.StreamHeader) == "" {
		return entry{}, false, errors.New("nats: missing stream header")
	}
	seqStr := r.Header.Get(jetstream.SequenceHeader)
	if seqStr == "" {
		return entry{}, false, errors.New("nats: missing sequence header")
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return entry{}, false, fmt.Errorf("nats: invalid sequence header '%s': %v", seqStr, err)
	}
	timeStr := r.Header.Get(jetstream.TimeStampHeaer)
	if timeStr == "" {
		return entry{}, false, errors.New("nats: missing timestamp header")
	}
	tm, err := time.Parse(time.RFC3339Nano, timeStr)
	if err != nil {
		return entry{}, false, fmt.Errorf("nats: invalid timestamp header '%s': %v", timeStr, err)
	}
	if r.Header.Get(jetstream.SubjectHeader) == "" {
		return entry{}, false, errors.New("nats: missing subject header")
	}
	e = entry{value: r.Data, revision: seq, created: tm}
	// kv.get: a delete or purge operation, or a marker.
	if op := r.Header.Get(hdrKVOperation); op != "" {
		deleted = op == opDelete || op == opPurge
	} else {
		switch r.Header.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge", "Remove":
			deleted = true
		}
	}
	if deleted {
		return e, true, jetstream.ErrKeyNotFound
	}
	return e, false, nil
}

// create is jetstream's KeyValue.Create of key with value and KeyTTL of
// the store's TTL: a publish expecting no last message of the key; where
// that fails and the key's last message is a delete, purge or marker, a
// publish expecting that message.
func (w *wire) create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := w.publish(ctx, key, value, 0)
	if err == nil {
		return rev, nil
	}
	if e, deleted, _ := w.get(ctx, key); deleted {
		return w.publish(ctx, key, value, e.revision)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("%w: %s", err, "key exists")
		}
		return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyExists)
	}
	return 0, err
}

// publish is jetstream's PublishMsg of value to key expecting revision as
// the key's last sequence, with the store's TTL: the same headers, the
// same retries while no stream answers, the same reading of the ack.
func (w *wire) publish(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ctx, cancel := w.withTimeout(ctx)
	defer cancel()
	m := &nats.Msg{Subject: w.putPre + key, Data: value, Header: make(nats.Header, 2)}
	m.Header[hdrExpectLastSeq] = []string{strconv.FormatUint(revision, 10)}
	if w.ttl != "" {
		m.Header[jetstream.MsgTTLHeader] = []string{w.ttl}
	}
	resp, err := w.nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		select {
		case <-ctx.Done():
		case <-time.After(jetstream.DefaultPubRetryWait):
		}
		resp, err = w.nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return 0, err
	}
	if seq, ok := parseAck(resp.Data); ok {
		return seq, nil
	}
	// publish.go's pubAckResponse.
	var ack struct {
		Type  string              `json:"type"`
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.PubAck == nil || ack.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return ack.Sequence, nil
}

// parseAck reads the sequence of a successful publish's ack in the form
// the server writes it, {"stream":"<name>","seq":<n>}, without
// reflection. Any other form (an error, a duplicate, a domain, or
// something unexpected) is not ok, and is read with encoding/json.
func parseAck(b []byte) (uint64, bool) {
	const pre = `{"stream":"`
	if len(b) < len(pre) || string(b[:len(pre)]) != pre {
		return 0, false
	}
	i := len(pre)
	start := i
	for i < len(b) && b[i] != '"' {
		if b[i] == '\\' || b[i] < 0x20 {
			return 0, false
		}
		i++
	}
	if i == start {
		return 0, false
	}
	const seq = `","seq":`
	if len(b)-i < len(seq) || string(b[i:i+len(seq)]) != seq {
		return 0, false
	}
	i += len(seq)
	var n uint64
	digits := 0
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		if digits == 19 || (digits > 0 && n == 0) {
			return 0, false
		}
		n = n*10 + uint64(b[i]-'0')
		digits++
	}
	if digits == 0 || i >= len(b) {
		return 0, false
	}
	if b[i] != '}' || i != len(b)-1 {
		return 0, false
	}
	return n, true
}
