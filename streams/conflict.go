package streams

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// IsConflict reports whether err is a compare-and-set that lost to
// another writer: a KV Create of a key that exists, a KV Update on a
// stale revision, or a publish whose expected last (subject) sequence no
// longer holds. A single-replica stream reports the last with error code
// 10071, a replicated one with 10164; both are conflicts, to be read
// again and retried, not failures.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
