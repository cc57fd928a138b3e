package worker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// maxBatchesInFlight is the server's default limit of atomic batches in
// flight per stream.
const maxBatchesInFlight = 50

// openBatches starts n atomic batches on jl_sessions and leaves them
// open; the returned func abandons them (a gap in each batch's sequence
// makes the server drop it).
func openBatches(t *testing.T, e *env, n int) (abandon func()) {
	t.Helper()
	nc := e.js.Conn()
	subject := streams.KVSubject(e.names.BucketSessions(), "test.open.batch")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("test-open-%d-%d", time.Now().UnixNano(), i)
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte("x")}
		m.Header.Set("Nats-Batch-Id", ids[i])
		m.Header.Set("Nats-Batch-Sequence", "1")
		// A request: the server answers once the message is part of the
		// open batch.
		if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
			t.Fatalf("open batch %d: %v", i, err)
		}
	}
	return func() {
		for _, id := range ids {
			m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte("x")}
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(3))
			if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
				t.Errorf("abandon batch %s: %v", id, err)
			}
		}
	}
}

// TestSettlementWhileBatchesAreFull makes a replay-unsafe tool's
// settlement meet a stream with as many atomic batches in flight as the
// server allows: a settlement is no batch (its entries are created one by
// one under their reserved ids, then the state compare-and-set), so it
// lands at once, with the call's real result, and nothing is retried.
func TestSettlementWhileBatchesAreFull(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: scripted(callLedger("Noting."), policies.ScriptEntry{Text: "Done."})}
	m, reg := registry(t)
	abandon := make(chan func(), 1)
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Metrics: m,
		Trace: func(ctx context.Context, p worker.TracePoint) {
			if p.Phase == worker.PhaseSettle && p.Kind == record.StepTool {
				abandon <- openBatches(t, e, maxBatchesInFlight)
			}
		}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "go")
	var free func()
	select {
	case free = <-abandon:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool call was not made")
	}
	defer free()
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	for _, en := range tr.Transcript {
		if en.Kind == record.KindToolResult && (en.IsError || en.Result != "appended "+en.CallID) {
			t.Errorf("tool result %+v: want the call's real result", en)
		}
	}
	if n := len(led.lines(t)); n != 1 {
		t.Errorf("tool ran %d times", n)
	}
	if v := metricValue(t, reg, "jetloop_worker_write_retries_total"); v != 0 {
		t.Errorf("%v writes retried, want none", v)
	}
}
