package streams_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

func TestIsConflict(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil},
		{name: "other", err: errors.New("boom")},
		{name: "key exists", err: fmt.Errorf("create: %w", jetstream.ErrKeyExists), want: true},
		{name: "revision mismatch", err: jetstream.ErrKeyRevisionMismatch, want: true},
		{name: "wrong last sequence R1", err: &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, want: true},
		{name: "wrong last sequence R3", err: fmt.Errorf("publish: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}), want: true},
		{name: "other API error", err: &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}},
		{name: "not found", err: jetstream.ErrKeyNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := streams.IsConflict(tt.err); got != tt.want {
				t.Fatalf("IsConflict(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
