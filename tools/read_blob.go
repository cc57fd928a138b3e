package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

const readBlobSchema = `{
	"type": "object",
	"properties": {
		"handle": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "The handle named in an earlier tool result, or in the placeholder of a result that is no longer shown."},
		"offset": {"type": "integer", "minimum": 0, "maximum": 1099511627776, "description": "Byte offset to start at (default 0)."},
		"limit":  {"type": "integer", "minimum": 1, "maximum": 1048576, "description": "Bytes to read (default and maximum: the page size)."}
	},
	"required": ["handle"],
	"additionalProperties": false
}`

// readBlob reads a stored tool result back, one page at a time. A session
// reads only its own handles, and a fork those of the sessions it was
// forked from.
type readBlob struct {
	blobs    BlobStore
	sessions NotesStore
	names    streams.Names
	limit    int
}

func (r *readBlob) Spec() Spec {
	return Spec{
		Name: "read_blob",
		Description: "Read part of an earlier tool result by its handle: one too large for the conversation, stored as a blob, or one no longer shown in it. " +
			fmt.Sprintf("Returns at most %d bytes from offset, and says where the next part starts.", r.limit),
		Schema:     json.RawMessage(readBlobSchema),
		ReplaySafe: true,
		State:      Stateless,
	}
}

func (r *readBlob) Call(ctx context.Context, call Call) (Result, error) {
	// Numbers decode as float64: JSON Schema counts 1.0 as an integer,
	// and the schema bounds them well inside float64's exact range.
	var raw struct {
		Handle string  `json:"handle"`
		Offset float64 `json:"offset"`
		Limit  float64 `json:"limit"`
	}
	if err := json.Unmarshal(call.Args, &raw); err != nil {
		return Result{}, fmt.Errorf("read_blob: arguments: %w", err)
	}
	args := struct {
		Handle string
		Offset int64
		Limit  int
	}{raw.Handle, int64(raw.Offset), int(raw.Limit)}
	// A handle is its session's: another session of the agent reads it
	// only if it was forked from that one.
	owner, err := r.names.ParseSessionKey(args.Handle)
	if err != nil || owner.Agent != call.Agent ||
		owner.Session != call.Session && (call.MayRead == nil || !call.MayRead(ctx, owner.Session)) {
		return errResult("read_blob: %q is not a handle of this session", args.Handle), nil
	}
	limit := args.Limit
	if limit == 0 || limit > r.limit {
		limit = r.limit
	}
	if id, ok := r.logHandle(owner, args.Handle); ok {
		return r.readEntry(ctx, owner, id, args.Handle, args.Offset, limit)
	}
	if r.blobs == nil {
		return errResult("read_blob: no blob store is configured"), nil
	}
	o, err := r.blobs.Get(ctx, args.Handle)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return errResult("read_blob: no blob %q", args.Handle), nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("read_blob: get %q: %w", args.Handle, err)
	}
	defer o.Close()
	info, err := o.Info()
	if err != nil {
		return Result{}, fmt.Errorf("read_blob: info %q: %w", args.Handle, err)
	}
	size := int64(info.Size)
	if args.Offset >= size {
		return errResult("read_blob: offset %d is past the end of blob %q (%d bytes)", args.Offset, args.Handle, size), nil
	}
	if _, err := io.CopyN(io.Discard, o, args.Offset); err != nil {
		return Result{}, fmt.Errorf("read_blob: seek %q to %d: %w", args.Handle, args.Offset, err)
	}
	buf := make([]byte, min(int64(limit), size-args.Offset))
	n, err := io.ReadFull(o, buf)
	if err != nil {
		return Result{}, fmt.Errorf("read_blob: read %q at %d: %w", args.Handle, args.Offset, err)
	}
	return pageResult(args.Handle, buf[:n], args.Offset, size), nil
}

// pageResult is one page of a stored result: a header saying where it is
// and where the next part starts, then the page, never ending inside a
// character.
func pageResult(handle string, page []byte, offset, size int64) Result {
	if end := offset + int64(len(page)); end < size {
		page = trimPartialRune(page)
	}
	end := offset + int64(len(page))
	var b strings.Builder
	fmt.Fprintf(&b, "[blob %q: bytes %d-%d of %d", handle, offset, end, size)
	if end < size {
		fmt.Fprintf(&b, "; next part at offset %d]\n", end)
	} else {
		b.WriteString("; end of blob]\n")
	}
	b.Write(page)
	return Result{Content: b.String()}
}

// logHandle reports whether handle is the transcript key of an entry of
// owner (<agent>.<session>.log.<id>), the handle of a masked result.
func (r *readBlob) logHandle(owner streams.SessionRef, handle string) (uint64, bool) {
	rest, ok := strings.CutPrefix(handle, owner.Key()+".log.")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 10, 64)
	return id, err == nil && id > 0 && r.names.LogKey(owner, id) == handle
}

// readEntry pages through the result of a tool_result entry of the
// calling session's transcript.
func (r *readBlob) readEntry(ctx context.Context, owner streams.SessionRef, id uint64, handle string, offset int64, limit int) (Result, error) {
	if r.sessions == nil {
		return errResult("read_blob: no session store is configured"), nil
	}
	e, err := r.sessions.Get(ctx, handle)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return errResult("read_blob: no result %q", handle), nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("read_blob: get %q: %w", handle, err)
	}
	var entry struct {
		Kind   string `json:"kind"`
		Result string `json:"result"`
	}
	if err := json.Unmarshal(e.Value(), &entry); err != nil || entry.Kind != "tool_result" {
		return errResult("read_blob: %q is not a tool result", handle), nil
	}
	size := int64(len(entry.Result))
	if offset > size || offset == size && size > 0 {
		return errResult("read_blob: offset %d is past the end of %q (%d bytes)", offset, handle, size), nil
	}
	end := min(size, offset+int64(limit))
	return pageResult(handle, []byte(entry.Result[offset:end]), offset, size), nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of p, so a
// page never ends inside a character; the next page starts with it.
func trimPartialRune(p []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(p); i++ {
		c := p[len(p)-i]
		if !utf8.RuneStart(c) {
			continue
		}
		if !utf8.FullRune(p[len(p)-i:]) {
			return p[:len(p)-i]
		}
		break
	}
	return p
}
