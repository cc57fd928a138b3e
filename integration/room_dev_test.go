package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/streams"
)

// roomAgents: one agent takes every issue comment, each in a session of
// its own, the other every push, in one long-lived session.
var roomAgents = map[string]string{
	"flooded.yaml": `name: flooded
model: {provider: scripted, script: [{text: Seen.}]}
triggers:
  - {name: comment, when: 'event.type == "com.github.issue_comment.created"', session: '"c-" + event.id'}
`,
	"steady.yaml": `name: steady
model: {provider: scripted, script: [{text: Built.}]}
triggers:
  - {name: push, when: 'event.type == "com.github.push"', session: event.data.repository.full_name}
`,
}

// signedDelivery posts a signed GitHub delivery and returns its status,
// Retry-After and body.
func signedDelivery(t *testing.T, base, event, delivery string, body []byte) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/github", bytes.NewReader(body))
	req.Header.Set(ingest.HeaderGitHubEvent, event)
	req.Header.Set(ingest.HeaderGitHubDelivery, delivery)
	req.Header.Set(ingest.HeaderGitHubSignature, ingest.Sign([]byte(ingestSecret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(raw)
}

// TestDevOneAgentsFloodLeavesTheOthersRoom floods one agent with signed
// GitHub deliveries on `jetloop dev` until it holds its share of JL_IN:
// its next delivery is answered 503 with Retry-After and a reason naming
// the agent and its share, JL_AUDIT records a no_room decision and the
// metric counts it, while another agent's deliveries are still answered
// 202 and run.
func TestDevOneAgentsFloodLeavesTheOthersRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	// JL_IN's room is 30% of the budget, 4.8 MiB; an agent's share 5% of it.
	t.Setenv("JETLOOP_IN_AGENT_SHARE", "5")
	p, ready := startDev(t, bin, "--storage-budget", "16MiB")
	env := []string{"JETLOOP_SERVER=" + ready["nats"]}
	dir := t.TempDir()
	for name, body := range roomAgents {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, stderr, err := runCLI(t, bin, env, "apply", path); err != nil {
			t.Fatalf("apply %s: %v\n%s%s", name, err, out, stderr)
		}
	}
	comment, err := os.ReadFile("../ingest/testdata/github/issue_comment/created.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	push, err := os.ReadFile("../ingest/testdata/github/push/payload.json")
	if err != nil {
		t.Fatal(err)
	}
	// 240 KiB of 16 KiB deliveries is fifteen or so; the whole room would
	// take about three hundred.
	refused := ""
	for i := range 200 {
		status, retry, body := signedDelivery(t, ready["http"], "issue_comment", fmt.Sprintf("flood-%d", i), comment)
		if status == http.StatusServiceUnavailable {
			if retry == "" {
				t.Fatalf("delivery %d: 503 without Retry-After: %s", i, body)
			}
			refused = body
			break
		}
		if status != http.StatusAccepted {
			t.Fatalf("delivery %d: %d %s", i, status, body)
		}
	}
	if !strings.Contains(refused, "agent flooded") || !strings.Contains(refused, "share is 5%") {
		t.Fatalf("the flood was never refused for its agent's share (last refusal %q)\n%s", refused, p.Stderr())
	}
	// The other agent's deliveries are admitted and run, while the
	// flooded agent's still are not.
	for i := range 3 {
		status, _, body := signedDelivery(t, ready["http"], "push", fmt.Sprintf("push-%d", i), push)
		if status != http.StatusAccepted || !strings.Contains(body, `"agent":"steady"`) {
			t.Fatalf("push %d while the other agent is refused: %d %s", i, status, body)
		}
	}
	if status, _, body := signedDelivery(t, ready["http"], "issue_comment", "flood-again", comment); status != http.StatusServiceUnavailable {
		t.Fatalf("the flooded agent's next delivery: %d %s", status, body)
	}
	awaitShow(t, p, bin, ready["nats"], "steady/Codertocat/Hello-World", time.Minute, func(s showJSON) error {
		if n := len(entriesOf(s, "event")); s.Status != "done" || n != 3 {
			return fmt.Errorf("status %s with %d events, want done with 3", s.Status, n)
		}
		return nil
	})
	// The refusal's record.
	nc, err := nats.Connect(ready["nats"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := streams.Default()
	s, err := js.Stream(ctx, n.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	// The flooded agent's decisions: one a message, or several, one a
	// line (admission.ParseRecords), when deliveries came together.
	subject, err := n.Audit(admission.AuditKind, "flooded")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for seq := uint64(1); !found; seq++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			t.Fatalf("no no_room record of the flooded agent in JL_AUDIT: %v", err)
		}
		seq = m.Sequence
		recs, err := admission.ParseRecords(m.Data)
		if err != nil {
			t.Fatalf("JL_AUDIT message %d on %s: %v", m.Sequence, subject, err)
		}
		for _, rec := range recs {
			found = found || rec.Agent == "flooded" && rec.Outcome == admission.NoRoom && strings.Contains(rec.Reason, "share")
		}
	}
	resp, err := http.Get(ready["http"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `jetloop_ingest_room_refused_total{agent="flooded",scope="agent",source="github"}`) {
		t.Fatalf("no refusal of the flooded agent in /metrics")
	}
	// The decision records the deliveries wrote count there too.
	for _, series := range []string{`jetloop_ingest_audit_records_total{agent="flooded"}`, `jetloop_ingest_audit_messages_total{agent="steady"}`, `jetloop_ingest_audit_record_wait_seconds_count`} {
		if !strings.Contains(string(metrics), series+" ") {
			t.Fatalf("no %s in /metrics", series)
		}
	}
}
