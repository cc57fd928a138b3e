package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

type letterJSON struct {
	Seq     uint64 `json:"seq"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
	Subject string `json:"subject"`
	Agent   string `json:"agent"`
	Session string `json:"session"`
	EventID string `json:"event_id"`
	Rule    string `json:"rule"`
}

// letters runs `jetloop dlq ls --json` with extra flags.
func letters(t *testing.T, srv []string, extra ...string) []letterJSON {
	t.Helper()
	code, out, errs := run(t, nil, append(append([]string{"dlq", "ls", "--json"}, extra...), srv...)...)
	if code != 0 {
		t.Fatalf("dlq ls: exit %d: %s", code, errs)
	}
	var resp struct {
		Letters []letterJSON `json:"letters"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("dlq ls --json: %v: %s", err, out)
	}
	return resp.Letters
}

// TestDLQRedrive dead-letters an event of a worker (its agent's model
// cannot be built) and an event admission could not decide (its session
// expression fails), fixes both definitions, and redrives them: each runs
// once, and a second redrive publishes nothing.
func TestDLQRedrive(t *testing.T) {
	natsURL, httpURL, data := runDev(t, map[string]string{"JETLOOP_WORK_DIR": t.TempDir()}, "--workers", "1")
	srv := []string{"--server", natsURL}
	dir := t.TempDir()
	apply := func(name, yaml string) {
		t.Helper()
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, errs := run(t, nil, append([]string{"apply", path}, srv...)...); code != 0 {
			t.Fatalf("apply %s: exit %d: %s %s", name, code, out, errs)
		}
	}
	scripted := "model: {provider: scripted, script: [{text: answered}]}\n"
	apply("keyless", "name: keyless\nmodel: {provider: openai, name: gpt-4o, base_url: 'http://127.0.0.1:1/v1', api_key_env: JL_TEST_UNSET_KEY}\n"+
		"triggers:\n  - {name: request, when: 'event.type == \"dev.jetloop.request\"', session: event.subject}\n")
	apply("picky", "name: picky\n"+scripted+
		"triggers:\n  - {name: hook, when: 'event.type == \"com.example.hook\"', session: event.data.thread}\n")

	// The worker cannot build keyless's model: the request is a dead
	// letter of reason no_definition.
	if code, _, errs := run(t, nil, append([]string{"send", "keyless", "s1", "hello"}, srv...)...); code != 0 {
		t.Fatalf("send: exit %d: %s", code, errs)
	}
	// picky's session expression reads a field the event lacks: a dead
	// letter of admission (rule_error).
	token, err := os.ReadFile(filepath.Join(data, "ingest-token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, httpURL+"/events", strings.NewReader(`{"specversion":"1.0","type":"com.example.hook","source":"/hooks","id":"hook-1","datacontenttype":"application/json","data":{"topic":"x"}}`))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /events: %d", resp.StatusCode)
	}
	var worker, rule letterJSON
	natstest.WaitFor(t, time.Minute, func() error {
		ls := letters(t, srv)
		for _, l := range ls {
			switch l.Reason {
			case "no_definition":
				worker = l
			case "rule_error":
				rule = l
			}
		}
		if worker.Seq == 0 || rule.Seq == 0 {
			return fmt.Errorf("letters %+v", ls)
		}
		return nil
	})
	if worker.Subject != "jl.in.keyless.s1" || worker.Agent != "keyless" || worker.Session != "s1" || !strings.Contains(worker.Detail, "JL_TEST_UNSET_KEY") {
		t.Errorf("worker letter %+v", worker)
	}
	if rule.Rule != "picky/hook" || rule.Agent != "picky" || rule.EventID != "hook-1" || rule.Subject != "" {
		t.Errorf("admission letter %+v", rule)
	}
	if ls := letters(t, srv, "--reason", "rule_error"); len(ls) != 1 || ls[0].Seq != rule.Seq {
		t.Errorf("ls --reason rule_error: %+v", ls)
	}
	if ls := letters(t, srv, "--agent", "keyless", "--since", "10m"); len(ls) != 1 || ls[0].Seq != worker.Seq {
		t.Errorf("ls --agent keyless: %+v", ls)
	}
	code, out, errs := run(t, nil, append([]string{"dlq", "show", fmt.Sprint(rule.Seq)}, srv...)...)
	if code != 0 || !strings.Contains(out, "reason:  rule_error") || !strings.Contains(out, `"topic":"x"`) {
		t.Errorf("dlq show: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := run(t, nil, append([]string{"dlq", "show", "999999"}, srv...)...); code != cli.ExitNotFound {
		t.Errorf("dlq show of no letter: exit %d: %s", code, errs)
	}
	if code, _, errs := run(t, nil, append([]string{"dlq", "redrive"}, srv...)...); code != 2 || !strings.Contains(errs, "redrive needs") {
		t.Errorf("redrive of nothing: exit %d: %s", code, errs)
	}

	// Fixed, both run once when redriven.
	apply("keyless", "name: keyless\n"+scripted+"triggers:\n  - {name: request, when: 'event.type == \"dev.jetloop.request\"', session: event.subject}\n")
	apply("picky", "name: picky\n"+scripted+
		"triggers:\n  - {name: hook, when: 'event.type == \"com.example.hook\"', session: 'has(event.data.thread) ? event.data.thread : \"unthreaded\"'}\n")
	code, out, errs = run(t, nil, append([]string{"dlq", "redrive", fmt.Sprint(worker.Seq), fmt.Sprint(rule.Seq)}, srv...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("letter %d: back on jl.in.keyless.s1", worker.Seq)) || !strings.Contains(out, fmt.Sprintf("letter %d: admitted again to picky/unthreaded", rule.Seq)) {
		t.Fatalf("redrive: exit %d: %s %s", code, out, errs)
	}
	t.Logf("redrive: %s", out)
	for _, ref := range []string{"keyless/s1", "picky/unthreaded"} {
		natstest.WaitFor(t, time.Minute, func() error {
			code, out, _ := run(t, nil, append([]string{"show", "--json", ref}, srv...)...)
			if code != 0 || !strings.Contains(out, `"status": "done"`) {
				return fmt.Errorf("%s: exit %d %s", ref, code, out)
			}
			return nil
		})
	}
	// Again: nothing is published, the first redrive is reported.
	code, out, errs = run(t, nil, append([]string{"dlq", "redrive", "--agent", "keyless"}, srv...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("letter %d: redriven before", worker.Seq)) {
		t.Fatalf("second redrive: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = run(t, nil, append([]string{"dlq", "redrive", fmt.Sprint(rule.Seq)}, srv...)...)
	if code != 0 || !strings.Contains(out, "redriven before, admitted to picky/unthreaded") {
		t.Fatalf("second redrive of the admission letter: exit %d: %s %s", code, out, errs)
	}
	for _, c := range []struct{ ref, kind string }{{"keyless/s1", "user"}, {"picky/unthreaded", "event"}} {
		code, out, _ := run(t, nil, append([]string{"show", "--json", c.ref}, srv...)...)
		var tr struct {
			Status     string `json:"status"`
			Transcript []struct {
				Kind string `json:"kind"`
			} `json:"transcript"`
		}
		if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil {
			t.Fatalf("show %s: %d %v", c.ref, code, err)
		}
		n := 0
		for _, e := range tr.Transcript {
			if e.Kind == c.kind {
				n++
			}
		}
		if n != 1 || tr.Status != "done" {
			t.Errorf("%s: %d %s entries, status %s; want the redriven event once\n%s\nletters %+v", c.ref, n, c.kind, tr.Status, out, letters(t, srv))
		}
	}
}

// TestDLQRedriveOfALetterWhoseSubjectNamesNoSession: `dlq redrive SEQ` of
// a bad_subject letter exits 4 (conflict) saying why; `dlq redrive
// --reason bad_subject` prints it as not redriven and exits 0.
func TestDLQRedriveOfALetterWhoseSubjectNamesNoSession(t *testing.T) {
	natsURL, _, _ := runDev(t, nil)
	srv := []string{"--server", natsURL}
	_, js := natstest.Connect(t, natsURL)
	names := streams.Default()
	m, err := dlq.New(names, dlq.BadSubject, "subject names no session", "jl.in.demo.=00", 1, nats.Header{"Ce-Id": []string{"b-1"}}, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(context.Background(), m, jetstream.WithExpectStream(names.StreamDLQ()))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, nil, append([]string{"dlq", "redrive", fmt.Sprint(ack.Sequence)}, srv...)...)
	if code != cli.ExitConflict || !strings.Contains(errs, "cannot be redriven") || !strings.Contains(errs, "names no session") {
		t.Errorf("redrive of letter %d: exit %d: %s %s; want %d saying it cannot be redriven", ack.Sequence, code, out, errs, cli.ExitConflict)
	}
	code, out, errs = run(t, nil, append([]string{"dlq", "redrive", "--reason", "bad_subject"}, srv...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("letter %d: not redriven: ", ack.Sequence)) || strings.Contains(out, "no letters selected") {
		t.Errorf("redrive --reason bad_subject: exit %d: %s %s; want letter %d reported not redriven", code, out, errs, ack.Sequence)
	}
	// With --json, stdout is the array of what was redriven, empty when
	// nothing was; the letter left is said on stderr.
	code, out, errs = run(t, nil, append([]string{"dlq", "redrive", "--reason", "bad_subject", "--json"}, srv...)...)
	var redriven []json.RawMessage
	if err := json.Unmarshal([]byte(out), &redriven); code != 0 || err != nil || redriven == nil || len(redriven) != 0 ||
		!strings.Contains(errs, fmt.Sprintf("letter %d: not redriven: ", ack.Sequence)) {
		t.Errorf("redrive --reason bad_subject --json: exit %d: stdout %q (%v) stderr %q; want an empty array, letter %d reported not redriven on stderr",
			code, out, err, errs, ack.Sequence)
	}
}
