package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestModelMetrics runs a scripted agent and an agent on an OpenAI
// compatible server (an in-process fake speaking Chat Completions) under
// `jetloop dev`, one of whose calls the server refuses, then reads GET
// /metrics: the model calls by outcome, their durations, tokens and cost
// are there by agent, provider and model.
func TestModelMetrics(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-fake" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(body), "refuse this") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"Invalid request.","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1741570283,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Fine."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":10,"total_tokens":1010}}`)
	}))
	defer fake.Close()
	natsURL, httpURL, _ := runDev(t, map[string]string{"JETLOOP_WORK_DIR": t.TempDir(), "OPENAI_API_KEY": "sk-fake"}, "--workers", "1")
	srv := []string{"--server", natsURL}
	def := filepath.Join(t.TempDir(), "oai.yaml")
	yaml := fmt.Sprintf("name: oai\nmodel: {provider: openai, name: gpt-4o-mini, base_url: '%s/v1'}\ntriggers:\n  - {name: request, when: 'event.type == \"dev.jetloop.request\"', session: event.subject}\n", fake.URL)
	if err := os.WriteFile(def, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, nil, append([]string{"apply", def}, srv...)...); code != 0 {
		t.Fatalf("apply: exit %d: %s %s", code, out, errs)
	}
	for _, agent := range []string{"demo", "oai"} {
		if code, out, errs := run(t, nil, append([]string{"send", "--wait", "--timeout", "1m", agent, "s1", "hello"}, srv...)...); code != 0 || !strings.Contains(out, "done") {
			t.Fatalf("send to %s: exit %d: %s %s", agent, code, out, errs)
		}
	}
	// A call the provider refuses is counted as an error of its kind.
	if code, out, errs := run(t, nil, append([]string{"send", "--wait", "--timeout", "1m", "oai", "s2", "refuse this"}, srv...)...); code != 1 || !strings.Contains(out, "failed") {
		t.Fatalf("send of a refused call: exit %d: %s %s", code, out, errs)
	}
	resp, err := http.Get(httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(body)
	for _, want := range []string{
		`jetloop_model_calls_total{agent="oai",model="gpt-4o-mini",outcome="ok",provider="openai"} 1`,
		`jetloop_model_tokens_total{agent="oai",direction="input",model="gpt-4o-mini",provider="openai"} 1000`,
		`jetloop_model_tokens_total{agent="oai",direction="output",model="gpt-4o-mini",provider="openai"} 10`,
		`jetloop_model_calls_total{agent="oai",model="gpt-4o-mini",outcome="bad_request",provider="openai"} 1`,
		`jetloop_model_call_duration_seconds_count{agent="oai",model="gpt-4o-mini",provider="openai"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The process's registry is shared by every test of the package: the
	// scripted agent's and the attempts' counts include theirs.
	for _, re := range []string{
		`jetloop_model_calls_total\{agent="demo",model="scripted",outcome="ok",provider="scripted"\} [1-9]`,
		`jetloop_model_attempts_total\{provider="openai",status="200"\} [1-9]`,
	} {
		if !regexp.MustCompile(re).MatchString(metrics) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	if !regexp.MustCompile(`jetloop_model_cost_usd_total\{agent="oai",model="gpt-4o-mini",provider="openai"\} 0\.000156`).MatchString(metrics) {
		t.Errorf("/metrics lacks the cost of the openai call:\n%s", grepLines(metrics, "jetloop_model_"))
	}
	if t.Failed() {
		t.Logf("model series:\n%s", grepLines(metrics, "jetloop_model_"))
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
