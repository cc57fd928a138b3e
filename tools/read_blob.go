package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

const readBlobSchema = `{
	"type": "object",
	"properties": {
		"handle": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "The blob handle named in an earlier tool result."},
		"offset": {"type": "integer", "minimum": 0, "maximum": 1099511627776, "description": "Byte offset to start at (default 0)."},
		"limit":  {"type": "integer", "minimum": 1, "maximum": 1048576, "description": "Bytes to read (default and maximum: the page size)."}
	},
	"required": ["handle"],
	"additionalProperties": false
}`

// readBlob reads a stored tool result back, one page at a time. A session
// reads only blobs of its own agent.
type readBlob struct {
	blobs BlobStore
	names streams.Names
	limit int
}

func (r *readBlob) Spec() Spec {
	return Spec{
		Name: "read_blob",
		Description: "Read part of a large earlier tool result that was stored as a blob. " +
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
	if r.blobs == nil {
		return errResult("read_blob: no blob store is configured"), nil
	}
	owner, err := r.names.ParseSessionKey(args.Handle)
	if err != nil || owner.Agent != call.Agent {
		return errResult("read_blob: %q is not a blob handle of this agent", args.Handle), nil
	}
	limit := args.Limit
	if limit == 0 || limit > r.limit {
		limit = r.limit
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
	page := buf[:n]
	if end := args.Offset + int64(n); end < size {
		page = trimPartialRune(page)
	}
	end := args.Offset + int64(len(page))
	var b strings.Builder
	fmt.Fprintf(&b, "[blob %q: bytes %d-%d of %d", args.Handle, args.Offset, end, size)
	if end < size {
		fmt.Fprintf(&b, "; next part at offset %d]\n", end)
	} else {
		b.WriteString("; end of blob]\n")
	}
	b.Write(page)
	return Result{Content: b.String()}, nil
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
