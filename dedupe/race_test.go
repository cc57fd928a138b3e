package dedupe_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// TestConcurrentRecordsOfOneIDOnR3: deliveries of one event recorded at
// the same time on a bucket replicated three times are each not an error
// (one wins, the others are duplicates), for a new id and for an id whose
// key was deleted before (the create then expects the delete's revision).
// A replicated stream refuses a write to a subject another write is still
// being proposed for with 10164, not 10071, and before the winner's write
// is stored a lookup does not find it, nor does one a lagging replica
// answers after.
func TestConcurrentRecordsOfOneIDOnR3(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	st, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.BucketDedupe())
	if err != nil {
		t.Fatal(err)
	}
	const src, writers, rounds = "https://github.com/octo/repo", 6, 12
	for r := range rounds {
		id := fmt.Sprint("id-", r)
		if r%2 == 1 {
			// A key deleted before: the records re-create it.
			if _, err := kv.Create(ctx, names.DedupeKey(src, id), []byte(`{"at":"2026-12-01T00:00:00Z"}`)); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, names.DedupeKey(src, id)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				<-start
				if err := st.Record(ctx, src, id, fmt.Appendf(nil, `{"writer":%d}`, w)); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d (deleted before: %v): concurrent record: %v", r, r%2 == 1, err)
		}
		// A direct get may be answered by a replica behind the leader
		// (about one lookup in ten right after a record, on this
		// cluster): the record is seen once that replica holds it.
		natstest.WaitFor(t, 10*time.Second, func() error {
			if _, seen, err := st.Seen(ctx, src, id); err != nil || !seen {
				return fmt.Errorf("round %d: seen after the records: %v %v", r, seen, err)
			}
			return nil
		})
	}
}
