package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrFull means a stream holds what jetloop lets it hold: new writes are
// refused until something is consumed or removed.
var ErrFull = errors.New("stream full")

// roomEvery is how long a Room trusts what it last read of its stream.
const roomEvery = time.Second

// Room refuses writes to a stream that holds half its max_bytes or half
// its max_msgs: for a stream the server cannot make refuse new messages
// itself (JL_IN: a stream with message schedules cannot use discard
// new), so that its limits, where the oldest messages would go, are never
// reached. Safe for concurrent use.
type Room struct {
	js   jetstream.JetStream
	name string

	mu   sync.Mutex
	at   time.Time
	info *jetstream.StreamInfo
	// msgs and bytes are what this process let through since it last
	// read the stream.
	msgs, bytes uint64
}

// NewRoom watches the stream name.
func NewRoom(js jetstream.JetStream, name string) *Room { return &Room{js: js, name: name} }

// near reports whether the stream held more than 40% of a limit when it
// was last read.
func (r *Room) near() bool {
	c, st := r.info.Config, r.info.State
	return c.MaxBytes > 0 && (st.Bytes+r.bytes)*5 > uint64(c.MaxBytes)*2 || c.MaxMsgs > 0 && (st.Msgs+r.msgs)*5 > uint64(c.MaxMsgs)*2
}

// Check returns ErrFull, saying how full, when writing msgs messages of
// bytes bytes would take the stream over half its limits. What it read of the stream is at most a second old, and
// read anew at every check once the stream is near the line; when it
// cannot read it, it answers from what it read last.
//
// msgs and bytes are what the caller is about to write; they count, until
// the next read of the stream, as written.
func (r *Room) Check(ctx context.Context, msgs, bytes int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info != nil {
		r.msgs, r.bytes = r.msgs+uint64(msgs), r.bytes+uint64(bytes)
	}
	// Near the line, every check reads the stream again: a burst must
	// not carry it past.
	if r.info == nil || time.Since(r.at) > roomEvery || r.near() {
		s, err := r.js.Stream(ctx, r.name)
		if err == nil {
			r.info, r.at = s.CachedInfo(), time.Now()
			r.msgs, r.bytes = uint64(msgs), uint64(bytes)
		} else if r.info == nil {
			return fmt.Errorf("streams: room of %s: %w", r.name, err)
		}
	}
	c, st := r.info.Config, r.info.State
	held, count := st.Bytes+r.bytes, st.Msgs+r.msgs
	var err error
	switch {
	case c.MaxBytes > 0 && held > uint64(c.MaxBytes/2):
		err = fmt.Errorf("%w: %s would hold %d bytes, over half its max_bytes %d: new events are refused until retention removes finished sessions' events (consumed events stay) or the storage budget grows",
			ErrFull, r.name, held, c.MaxBytes)
	case c.MaxMsgs > 0 && count > uint64(c.MaxMsgs/2):
		err = fmt.Errorf("%w: %s would hold %d messages, over half its max_msgs %d: new events are refused until retention removes finished sessions' events (consumed events stay) or the storage budget grows",
			ErrFull, r.name, count, c.MaxMsgs)
	}
	if err != nil {
		// Not written after all.
		r.msgs, r.bytes = r.msgs-uint64(msgs), r.bytes-uint64(bytes)
	}
	return err
}
