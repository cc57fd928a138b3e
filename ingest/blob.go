package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// ExtBlob is the extension set on an event whose data was too large for
// a message: the jl_blobs handle of the data, which the event's data then
// describes (BlobRef). The session's agent reads it with read_blob.
const ExtBlob = "jlblob"

// BlobRef is the data of an event whose own data went to jl_blobs: a
// claim check. Admission evaluated the full data; the session gets the
// handle, the size, the digest and a note a model can act on.
type BlobRef struct {
	Blob BlobInfo `json:"jetloop_blob"`
	Note string   `json:"note"`
}

// BlobInfo describes stored event data.
type BlobInfo struct {
	// Handle is the object's name in jl_blobs; empty when the data was
	// not kept (a dead letter).
	Handle      string `json:"handle,omitempty"`
	Size        int    `json:"size"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type,omitempty"`
}

// claimCheck moves the data of events too large for a message to
// jl_blobs, one object per session the event goes to, so that bodies up
// to the receiver's limit (GitHub's 25 MB) are delivered, not refused.
type claimCheck struct {
	js    jetstream.JetStream
	names streams.Names
	// max is the largest data published as is.
	max int
}

// large reports whether e's data must go to jl_blobs.
func (c *claimCheck) large(e event.Event) bool {
	return c != nil && c.max > 0 && len(e.DataEncoded) > c.max
}

func digest(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// forSession returns e for ref: e itself when its data fits a message,
// else e with its data stored in jl_blobs under the session's handle and
// replaced by a BlobRef. Storing is idempotent: a retry writes the same
// object again.
func (c *claimCheck) forSession(ctx context.Context, e event.Event, ref streams.SessionRef) (event.Event, error) {
	if !c.large(e) {
		return e, nil
	}
	// The data's digest in the name: it cannot be guessed without it.
	handle, err := c.names.EventBlob(ref, events.MsgID(e)+digest(e.DataEncoded)[:32])
	if err != nil {
		return e, fmt.Errorf("ingest: blob name for event %s: %w", e.ID(), err)
	}
	obs, err := c.js.ObjectStore(ctx, c.names.ObjectBlobs())
	if err != nil {
		return e, fmt.Errorf("ingest: open %s: %w", c.names.ObjectBlobs(), err)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: handle, Description: "data of event " + e.ID()}, bytes.NewReader(e.DataEncoded)); err != nil {
		return e, fmt.Errorf("ingest: store data of event %s (%d bytes) as %s: %w", e.ID(), len(e.DataEncoded), handle, err)
	}
	return c.replace(e, BlobInfo{Handle: handle, Size: len(e.DataEncoded), SHA256: digest(e.DataEncoded), ContentType: e.DataContentType()},
		fmt.Sprintf("The event's data (%d bytes) is too large for a message; it is stored as blob %s: read it with read_blob.", len(e.DataEncoded), handle))
}

// withoutData returns e for records that go to no session (dead
// letters): a large event's data is described, not kept.
func (c *claimCheck) withoutData(e event.Event) (event.Event, error) {
	if !c.large(e) {
		return e, nil
	}
	return c.replace(e, BlobInfo{Size: len(e.DataEncoded), SHA256: digest(e.DataEncoded), ContentType: e.DataContentType()},
		fmt.Sprintf("The event's data (%d bytes) was too large for a message and is not kept here.", len(e.DataEncoded)))
}

func (c *claimCheck) replace(e event.Event, info BlobInfo, note string) (event.Event, error) {
	data, err := json.Marshal(BlobRef{Blob: info, Note: note})
	if err != nil {
		return e, fmt.Errorf("ingest: claim check of event %s: %w", e.ID(), err)
	}
	bare := e
	bare.DataEncoded = nil // not copied only to be replaced
	out := bare.Clone()
	if err := out.SetData(event.ApplicationJSON, data); err != nil {
		return e, fmt.Errorf("ingest: claim check of event %s: %w", e.ID(), err)
	}
	if info.Handle != "" {
		out.SetExtension(ExtBlob, info.Handle)
	}
	return out, nil
}
