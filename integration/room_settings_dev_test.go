package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// TestDevRoomSettings shows JETLOOP_EVENT_HORIZON, JETLOOP_IN_SOURCE_SHARE
// and JETLOOP_IN_SOURCE_WINDOW through `jetloop dev`: a long-lived session
// keeps only its horizon of consumed events in JL_IN; one source's flood is
// refused with 503 naming the source and its share, while another source's
// request is admitted and runs; once the window moves on, the source is
// admitted again. A value out of range stops the process with the setting
// named.
func TestDevRoomSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)

	for _, bad := range []string{"JETLOOP_EVENT_HORIZON=0", "JETLOOP_IN_SOURCE_SHARE=101", "JETLOOP_IN_SOURCE_WINDOW=10ms"} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, devArgs(t.TempDir())...)
		cmd.Env = append(os.Environ(), "JETLOOP_WORK_DIR="+t.TempDir(), bad)
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), strings.SplitN(bad, "=", 2)[0]) {
			t.Fatalf("dev with %s: %v, want an exit naming the setting\n%s", bad, err, out)
		}
	}

	// JL_IN's room is 30% of the budget, 4.8 MiB; a source's share 5% of
	// it within 30 s; no agent share.
	t.Setenv("JETLOOP_IN_AGENT_SHARE", "100")
	t.Setenv("JETLOOP_IN_SOURCE_SHARE", "5")
	t.Setenv("JETLOOP_IN_SOURCE_WINDOW", "30s")
	t.Setenv("JETLOOP_EVENT_HORIZON", "2")
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

	// The horizon: four pushes to one session, each run to rest before
	// the next; JL_IN keeps the newest two.
	const session = "steady/Codertocat/Hello-World"
	for i := range 4 {
		status, _, body := signedDelivery(t, ready["http"], "push", fmt.Sprintf("push-%d", i), push)
		if status != http.StatusAccepted {
			t.Fatalf("push %d: %d %s", i, status, body)
		}
		awaitShow(t, p, bin, ready["nats"], session, time.Minute, func(s showJSON) error {
			if n := len(entriesOf(s, "event")); s.Status != "done" || n != i+1 {
				return fmt.Errorf("status %s with %d events, want done with %d", s.Status, n, i+1)
			}
			return nil
		})
	}
	nc, err := nats.Connect(ready["nats"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	names := streams.Default()
	ref, err := streams.NewSessionRef("steady", "Codertocat/Hello-World")
	if err != nil {
		t.Fatal(err)
	}
	in, err := js.Stream(t.Context(), names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		info, err := in.Info(t.Context(), jetstream.WithSubjectFilter(names.In(ref)))
		if err != nil {
			return err
		}
		if n := info.State.Subjects[names.In(ref)]; n != 2 {
			return fmt.Errorf("JL_IN holds %d events of %s, want its horizon, 2", n, session)
		}
		return nil
	})

	// The source share: 240 KiB of 16 KiB deliveries within the window
	// is fifteen or so.
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
	if !strings.Contains(refused, "source github") || !strings.Contains(refused, "share is 5%") {
		t.Fatalf("the flood was never refused for its source's share (last refusal %q)\n%s", refused, p.Stderr())
	}
	// Another agent of the same source is refused too; another source is not.
	if status, _, body := signedDelivery(t, ready["http"], "push", "push-refused", push); status != http.StatusServiceUnavailable || !strings.Contains(body, "source github") {
		t.Fatalf("a push while the source is refused: %d %s", status, body)
	}
	if out, stderr, err := runCLI(t, bin, env, "send", "--wait", "steady", "asked", "hello"); err != nil || !strings.Contains(out, "done") {
		t.Fatalf("a user request while github is refused: %v\n%s%s", err, out, stderr)
	}
	// The window moves on: the source is admitted again.
	i := 0
	err = natstest.Poll(t.Context(), 2*time.Minute, func() error {
		i++
		status, _, body := signedDelivery(t, ready["http"], "issue_comment", fmt.Sprintf("later-%d", i), comment)
		if status != http.StatusAccepted {
			return fmt.Errorf("%d %s", status, body)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("github never admitted again after its window: %v", err)
	}
}
