package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// BlobStore keeps large tool results out of the model's context. The
// jl_blobs object store (jetstream.ObjectStore) satisfies it.
type BlobStore interface {
	// PutBytes stores data under name, replacing what was there.
	PutBytes(ctx context.Context, name string, data []byte) (*jetstream.ObjectInfo, error)
	// Get opens the object stored under name.
	Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error)
}

// Defaults of the result offload.
const (
	// DefaultBlobThreshold is the result size above which the full content
	// goes to the blob store.
	DefaultBlobThreshold = 16 << 10
	// DefaultPreviewLines and DefaultPreviewBytes bound the part of an
	// offloaded result that stays in the context.
	DefaultPreviewLines = 20
	DefaultPreviewBytes = 2 << 10
)

// blobName is the jl_blobs name of a call's full result: the session's,
// with a digest of the content in it, so that it cannot be guessed.
func blobName(names streams.Names, call Call, content string) (string, error) {
	ref, err := streams.NewSessionRef(call.Agent, call.Session)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(content))
	return names.ResultBlob(ref, call.ID, hex.EncodeToString(h[:16]))
}

// preview is the head of content: at most lines lines and maxBytes bytes,
// cut on a rune boundary.
func preview(content string, lines, maxBytes int) string {
	end := 0
	for n := 0; n < lines && end < len(content); n++ {
		i := strings.IndexByte(content[end:], '\n')
		if i < 0 {
			end = len(content)
			break
		}
		end += i + 1
	}
	return cutRunes(content[:end], maxBytes)
}

// cutRunes is the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func offloadNote(head, handle string, size int) string {
	var b strings.Builder
	b.WriteString(head)
	if head != "" && !strings.HasSuffix(head, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[… full result is %d bytes, stored as blob %q; read it in parts with read_blob]", size, handle)
	return b.String()
}

func truncatedNote(head string, size int, why string) string {
	var b strings.Builder
	b.WriteString(head)
	if head != "" && !strings.HasSuffix(head, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[… truncated: result is %d bytes, only the first %d are shown; %s]", size, len(head), why)
	return b.String()
}
