package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// writeRecords publishes the JL_AUDIT decision records msgs that the
// ingest writes beside admission's group commit (a duplicate delivery's,
// a no_room refusal's), each alone with its Nats-Msg-Id, as
// admission.Publish does, and counts them in m as admission counts its
// own (admission.RecordObserver): stored, or failed as refused or not
// acknowledged before ctx ended. A record the server drops as a
// duplicate of one it holds is not counted as stored again.
func writeRecords(ctx context.Context, js jetstream.JetStream, m *Metrics, msgs []*nats.Msg) error {
	start := time.Now()
	var errs []error
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, msg := range msgs {
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			m.RecordsFailed(recordAgent(msg.Subject), 1, false)
			errs = append(errs, fmt.Errorf("publish on %s: %w", msg.Subject, err))
			continue
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		agent := recordAgent(f.Msg().Subject)
		select {
		case ack := <-f.Ok():
			if !ack.Duplicate {
				m.RecordsStored(agent, 1)
			}
			m.RecordsWaited(1, time.Since(start))
		case err := <-f.Err():
			m.RecordsFailed(agent, 1, false)
			errs = append(errs, fmt.Errorf("publish on %s: %w", f.Msg().Subject, err))
		case <-ctx.Done():
			for _, g := range futures[i:] {
				m.RecordsFailed(recordAgent(g.Msg().Subject), 1, true)
			}
			return errors.Join(append(errs, fmt.Errorf("publish on %s: %w", f.Msg().Subject, ctx.Err()))...)
		}
	}
	return errors.Join(errs...)
}

// recordAgent is the agent token of a record's subject, its last
// (admission.NoAgent for a record no single agent made).
func recordAgent(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
