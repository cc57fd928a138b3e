package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
)

// Environment of the browser tests.
const (
	// envBrowserTests=1 makes a missing chromium a failure, not a skip:
	// .ci/run sets it, so the tests cannot pass there by not running. A
	// CI service's CI=true (or 1) does the same.
	envBrowserTests = "JETLOOP_BROWSER_TESTS"
	// envChromium names the browser to drive; default chromium on PATH.
	envChromium = "JETLOOP_CHROMIUM"
	// envArtifacts is the folder that keeps a failed test's screenshots;
	// default <tmp>/jetloop-artifacts.
	envArtifacts = "JETLOOP_ARTIFACTS"
	// envScreenshots, when set, is the folder the test writes the
	// README's screenshots to (docs/).
	envScreenshots = "JETLOOP_SCREENSHOTS"
)

// chromium finds the browser, or skips the test; under CI
// (envBrowserTests=1, CI=true) it fails it instead.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH (nor " + envChromium + "): the dashboard's browser tests need it (Debian: apt-get install chromium)"
	if os.Getenv(envBrowserTests) == "1" {
		t.Fatal(msg + "; " + envBrowserTests + "=1 requires them")
	}
	if ci := os.Getenv("CI"); ci == "true" || ci == "1" {
		t.Fatal(msg + "; under CI (CI=" + ci + ") they must run")
	}
	t.Skip(msg)
	return ""
}

// browser is a headless chromium tab for one test, whose page errors (an
// exception, a console error, a refused request) fail the test, and
// whose screen is kept as an artefact when the test fails.
type browser struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	// problems are the page's exceptions and console errors so far.
	problems []string
	// dialogs are the messages of the dialogs (confirm) the page opened,
	// each accepted.
	dialogs []string
}

func newBrowser(t *testing.T, path string, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 4*time.Minute)
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		var p string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			p = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				p += " " + ev.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded:
			// The browser's own reports: a refused script or style (the
			// page's CSP), a request that failed.
			if ev.Entry.Level == cdplog.EntryLevelError {
				p = "log: " + ev.Entry.Text + " " + ev.Entry.URL
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				p = "console error: " + strings.Join(args, " ")
			}
		}
		if p != "" {
			b.mu.Lock()
			b.problems = append(b.problems, p)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("chromium %s: enable its log: %v", path, err)
	}
	// A confirm (Cancel asks one) is answered OK, as a person would, and
	// its question kept for the test to read.
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	}()
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	b.use(t)
	return b
}

// use makes t the test the tab works for (a subtest): its failures fail
// t, and the screen is kept when t fails.
func (b *browser) use(t *testing.T) {
	b.t = t
	t.Cleanup(func() {
		if t.Failed() {
			b.keepScreen(t, "failed")
		}
	})
}

// do runs actions, failing the test with what failed.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v%s", what, err, b.report())
	}
}

// await waits until the JavaScript expression is true.
func (b *browser) await(what, expr string, timeout time.Duration) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		var text string
		text, _ = chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText : ""`))
		b.t.Fatalf("%s: %v\npage:\n%s%s", what, err, text, b.report())
	}
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v%s", expr, err, b.report())
	}
	return v
}

func (b *browser) report() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) == 0 {
		return ""
	}
	return "\npage problems:\n" + strings.Join(b.problems, "\n")
}

// checkPage fails the test on any exception or console error the page
// had (a blocked script or style, a failed request the page logged).
func (b *browser) checkPage() {
	b.t.Helper()
	if r := b.report(); r != "" {
		b.t.Fatal(r)
	}
}

// keepScreen saves the tab's whole page as a PNG in the artefacts folder.
func (b *browser) keepScreen(t *testing.T, name string) {
	dir := os.Getenv(envArtifacts)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "jetloop-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("artefacts folder %s: %v", dir, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot of the page: %s", path)
}

// screenshot writes the README's screenshot name when envScreenshots asks
// for them.
func (b *browser) screenshot(name string) {
	dir := os.Getenv(envScreenshots)
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// gatedAgent writes a file with shell, once a person approves the call.
const gatedAgent = `name: gated
description: Writes a file once a person approves.
model:
  provider: scripted
  script:
    - text: Writing the file.
      tool_calls: [{name: shell, args: {command: "echo approved > approved.txt && cat approved.txt"}}]
      usage: {input_tokens: 420, output_tokens: 18}
    - text: The file is written.
      usage: {input_tokens: 510, output_tokens: 9}
system: You write files when asked.
tools: [shell]
budget: {max_turns: 6, max_tokens: 5000, deadline: 5m}
approvals:
  - name: every-shell
    when: tool.name == "shell"
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`

// hostileAgent answers, and runs a tool whose result is, markup.
const hostileAgent = `name: hostile
description: Answers with markup.
model:
  provider: scripted
  script:
    - text: "<b>bold</b> answer"
      tool_calls: [{name: shell, args: {command: "printf '%s' '<img src=x onerror=window.__xss=2>'"}}]
      usage: {input_tokens: 10, output_tokens: 5}
    - text: "<i>done</i>"
      usage: {input_tokens: 10, output_tokens: 5}
system: You answer.
tools: [shell]
budget: {max_turns: 4, max_tokens: 5000, deadline: 5m}
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`

// slowAgent's first model call takes a while (time to interrupt it) and
// asks for a result too large for the context, which goes to jl_blobs.
const slowAgent = `name: slow
description: Lists numbers, slowly.
model:
  provider: scripted
  script:
    - text: Listing.
      delay: 10s
      tool_calls: [{name: shell, args: {command: "seq 1 60000"}}]
      usage: {input_tokens: 100, output_tokens: 10}
    - text: Listed.
      usage: {input_tokens: 200, output_tokens: 5}
tools: [shell]
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`

// leadAgent delegates to helperAgent, which answers at once; askerAgent
// asks a person.
const (
	askerAgent = `name: asker
description: Asks which colour.
model:
  provider: scripted
  script:
    - text: Let me ask.
      tool_calls: [{name: ask_human, args: {question: Which colour should the button be?}}]
    - text: Painting it.
tools: [ask_human]
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`
	leadAgent = `name: lead
description: Asks the helper.
model:
  provider: scripted
  script:
    - text: Asking the helper.
      tool_calls: [{name: delegate, args: {agent: helper, task: count the files}}]
    - text: The helper counted three.
tools: [delegate]
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`
	helperAgent = `name: helper
description: Counts.
model:
  provider: scripted
  script:
    - text: Three files.
`
)

// TestDashboardInBrowser drives the dashboard of `jetloop dev` in a
// headless chromium, as a person would: the one-time link signs in; the
// list shows a blocked session, live; its page shows the call waiting
// for approval with its arguments; Approve runs it to done; a steer
// typed into the page reaches the transcript before the next model
// call; an ask_human question is answered from the page; Deny with a
// reason, Cancel, Interrupt and Resume, and Fork at a
// turn act on the session as the CLI's verbs do; a result kept in
// jl_blobs is read page by page on demand; a schedule is suspended and
// resumed (its next fire shown); an agent's second version is listed with
// its history; a dead letter is read and redriven once; a delegating session links its child and the child its
// parent and task; the page holds on a phone-sized screen; every control has a
// label; the page has no error.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop and chromium")
	}
	path := chromium(t)
	bin := buildJetloop(t)
	data := t.TempDir()
	p := startProc(t, bin, devArgs(data)...)
	ready := p.waitReady(time.Minute)
	link := dashboardLink(t, p)
	if !strings.HasPrefix(link, ready["http"]+"/ui/login?code=") || ready["ui"] != ready["http"]+"/ui/" {
		t.Fatalf("dashboard link %q, ready %v", link, ready)
	}
	url := ready["nats"]
	c, err := policies.Parse("gated.yaml", []byte(gatedAgent))
	if err != nil {
		t.Fatal(err)
	}
	putAgent(t, url, c.Definition)
	slow, err := policies.Parse("slow.yaml", []byte(slowAgent))
	if err != nil {
		t.Fatal(err)
	}
	putAgent(t, url, slow.Definition)
	for _, def := range []string{leadAgent, helperAgent, askerAgent} {
		c, err := policies.Parse("agent.yaml", []byte(def))
		if err != nil {
			t.Fatal(err)
		}
		putAgent(t, url, c.Definition)
	}
	sendTo := func(agent, session, text string) {
		t.Helper()
		natstest.WaitFor(t, 30*time.Second, func() error {
			_, err := jetloopCmd(t, bin, "send", "--server", url, agent, session, text)
			return err
		})
	}
	send := func(session, text string) {
		t.Helper()
		sendTo("gated", session, text)
	}
	waitShow := func(ref, status string) showJSON {
		t.Helper()
		var s showJSON
		natstest.WaitFor(t, time.Minute, func() error {
			var err error
			if s, err = show(t, bin, url, ref); err != nil {
				return err
			}
			if s.Status != status {
				return fmt.Errorf("%s is %s, want %s", ref, s.Status, status)
			}
			return nil
		})
		return s
	}

	b := newBrowser(t, path)
	b.do("open the one-time link", chromedp.Navigate(link))
	b.await("signed in, the sessions list", `location.pathname === "/ui/" && !!document.querySelector("h1") && document.querySelector("h1").textContent.startsWith("Sessions")`, 30*time.Second)
	b.await("the list is live", `document.querySelector(".live.on") !== null`, 30*time.Second)

	// A session of the example agent runs to done, and one blocks for
	// approval while the list is open: both show up, without a reload.
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "--wait", "demo", "d1", "note this"); err != nil {
		t.Fatal(err)
	}
	b.await("the finished session in the list", `(() => { const r = document.querySelector('tr[data-key="demo/d1"]'); return !!r && r.querySelector(".badge").textContent === "done"; })()`, 30*time.Second)
	send("s1", "write the file")
	waitShow("gated/s1", "blocked")
	b.await("the blocked session in the list", `(() => { const r = document.querySelector('tr[data-key="gated/s1"]'); return !!r && r.querySelector(".badge").textContent === "blocked" && r.textContent.includes("call_"); })()`, 30*time.Second)
	b.screenshot("dashboard-sessions.png")
	b.checkPage()

	t.Run("approve", func(t *testing.T) {
		b.use(t)
		b.do("open the session", chromedp.Click(chromedp.CSS(`tr[data-key="gated/s1"] a`)))
		b.await("the call waiting for approval, with its arguments", `(() => { const s = document.querySelector("section.approval"); return !!s && s.querySelector("pre").textContent.includes("echo approved > approved.txt"); })()`, 30*time.Second)
		b.await("the timeline read", `document.querySelectorAll(".timeline li").length >= 4`, 30*time.Second)
		if got := eval[string](b, `document.querySelector("section.approval h2").textContent`); got != "Approval: shell" {
			t.Fatalf("approval heading %q", got)
		}
		b.await("the budget bars", `document.querySelectorAll(".budget meter").length >= 3`, 10*time.Second)
		b.screenshot("dashboard-session.png")
		b.do("press Approve", chromedp.Click(chromedp.CSS(`section.approval button.primary`)))
		b.await("the session runs to done", `document.querySelector("h1 .badge") && document.querySelector("h1 .badge").textContent === "done"`, time.Minute)
		b.await("the tool's result in the timeline", `[...document.querySelectorAll('.timeline li[data-kind="tool_result"] pre')].some((p) => p.textContent.includes("approved"))`, 30*time.Second)
		s := waitShow("gated/s1", "done")
		res := toolResults(s.Transcript, "shell")
		if len(res) != 1 || res[0]["is_error"] != false || !strings.Contains(res[0]["result"].(string), "approved") {
			t.Fatalf("shell results %v, want the approved call's output once", res)
		}
		var approved bool
		for _, e := range s.Transcript {
			if e["kind"] == "control" && e["name"] == "approve" {
				approved = true
			}
		}
		if !approved {
			t.Fatalf("no approve in the transcript: %v", s.Transcript)
		}
		b.checkPage()
	})

	t.Run("steer", func(t *testing.T) {
		b.use(t)
		send("s2", "write another file")
		waitShow("gated/s2", "blocked")
		b.do("open the second session", chromedp.Navigate(ready["http"]+"/ui/#/s/gated/s2"))
		b.await("its page", `!!document.querySelector("#steer-text") && !!document.querySelector("section.approval") && document.querySelectorAll(".timeline li").length >= 4`, 30*time.Second)
		const text = "Keep the file short, please."
		b.do("type a steer", chromedp.SendKeys(chromedp.ID("steer-text"), text))
		b.do("send it", chromedp.Click(chromedp.CSS(`form:has(#steer-text) button[type="submit"]`)))
		b.await("the steer waits for the next model call", `document.querySelector(".facts") && document.querySelector(".facts").textContent.includes("`+text+`")`, 30*time.Second)
		b.do("approve", chromedp.Click(chromedp.CSS(`section.approval button.primary`)))
		b.await("the steer in the timeline", `[...document.querySelectorAll('.timeline li[data-kind="control"]')].some((li) => li.textContent.includes("`+text+`"))`, time.Minute)
		b.await("done", `document.querySelector("h1 .badge").textContent === "done"`, time.Minute)
		s := waitShow("gated/s2", "done")
		steer, answer := -1, -1
		for i, e := range s.Transcript {
			if e["kind"] == "control" && e["name"] == "steer" && e["text"] == text {
				steer = i
			}
			if e["kind"] == "assistant" && e["text"] == "The file is written." {
				answer = i
			}
		}
		if steer < 0 || answer < steer {
			b, _ := json.MarshalIndent(s.Transcript, "", "  ")
			t.Fatalf("the steer (entry %d) is not in the transcript before the next model call's answer (%d):\n%s", steer, answer, b)
		}
		b.checkPage()
	})

	// fact is the text of the session page's fact named dt.
	fact := func(dt string) string {
		return `(() => { const d = [...document.querySelectorAll(".facts dt")].find((d) => d.textContent === "` + dt + `"); return d ? d.nextElementSibling.textContent : ""; })()`
	}
	badgeIs := func(status string) string {
		return `(document.querySelector("h1 .badge") || {}).textContent === "` + status + `"`
	}

	t.Run("deny", func(t *testing.T) {
		b.use(t)
		send("s3", "write a third file")
		waitShow("gated/s3", "blocked")
		b.do("open the third session", chromedp.Navigate(ready["http"]+"/ui/#/s/gated/s3"))
		b.await("the call waiting for approval", `!!document.querySelector("section.approval #approve-note") && document.querySelectorAll(".timeline li").length >= 4`, 30*time.Second)
		const reason = "not in this folder"
		b.do("give a reason", chromedp.SendKeys(chromedp.ID("approve-note"), reason))
		b.do("press Deny", chromedp.Click(chromedp.CSS(`section.approval button.danger`)))
		b.await("the session runs to done", badgeIs("done"), time.Minute)
		b.await("the refusal in the timeline", `[...document.querySelectorAll('.timeline li[data-kind="tool_result"]')].some((li) => li.textContent.includes("denied: `+reason+`"))`, 30*time.Second)
		s := waitShow("gated/s3", "done")
		res := toolResults(s.Transcript, "shell")
		if len(res) != 1 || res[0]["is_error"] != true || res[0]["result"] != "denied: "+reason+" (the call did not run)" {
			t.Fatalf("shell results %v, want the denied call's refusal once", res)
		}
		b.checkPage()
	})

	t.Run("cancel", func(t *testing.T) {
		b.use(t)
		send("s4", "write a fourth file")
		waitShow("gated/s4", "blocked")
		b.do("open the fourth session", chromedp.Navigate(ready["http"]+"/ui/#/s/gated/s4"))
		b.await("its page", `!!document.querySelector("section.approval") && `+badgeIs("blocked"), 30*time.Second)
		b.do("press Cancel", chromedp.Click(chromedp.CSS(`.actions button.danger`)))
		b.await("the session cancelled", badgeIs("cancelled"), time.Minute)
		b.mu.Lock()
		asked := strings.Join(b.dialogs, "\n")
		b.mu.Unlock()
		if !strings.Contains(asked, "Cancel gated/s4?") {
			t.Fatalf("Cancel asked %q, want a confirmation naming the session", asked)
		}
		waitShow("gated/s4", "cancelled")
		if eval[bool](b, `document.querySelector(".actions button.danger").disabled`) != true {
			t.Fatal("Cancel is still enabled for a cancelled session")
		}
		b.checkPage()
	})

	t.Run("dead letter", func(t *testing.T) {
		b.use(t)
		// A request to the cancelled session is dead-lettered.
		send("s4", "one more file")
		row := `[...document.querySelectorAll("tbody tr")].find((tr) => tr.textContent.includes("session_cancelled") && tr.textContent.includes("gated/s4"))`
		b.do("open the dead letters", chromedp.Navigate(ready["http"]+"/ui/#/dlq?reason=session_cancelled"))
		natstest.WaitFor(t, time.Minute, func() error {
			b.do("read them again", chromedp.Reload())
			if !eval[bool](b, `(() => { const r = `+row+`; return !!r; })()`) {
				return fmt.Errorf("no session_cancelled letter of gated/s4 listed")
			}
			return nil
		})
		b.do("open the letter", chromedp.Click(chromedp.CSS(`tbody tr:has(a[href="#/s/gated/s4"]) td:first-child a`)))
		b.await("the letter, its detail and data", `(document.querySelector("h1") || {textContent: ""}).textContent.startsWith("Dead letter #") && `+fact("Detail")+` === "session is cancelled" && (document.querySelector("main > pre") || {textContent: ""}).textContent.includes("one more file")`, 30*time.Second)
		seq := strings.TrimPrefix(eval[string](b, `document.querySelector("h1").textContent`), "Dead letter #")
		b.do("press Redrive", chromedp.Click(chromedp.CSS(`main button.primary`)))
		b.await("redriven", `document.querySelector("#notice").textContent.includes("Letter #`+seq+` redriven to jl.in.gated.")`, 30*time.Second)
		b.do("read the letter again", chromedp.Reload())
		b.await("the letter again", `(document.querySelector("h1") || {}).textContent === "Dead letter #`+seq+`" && !!document.querySelector("main button.primary")`, 30*time.Second)
		b.do("press Redrive again", chromedp.Click(chromedp.CSS(`main button.primary`)))
		b.await("redriven once only", `document.querySelector("#notice").textContent.includes("Letter #`+seq+` was redriven before.")`, 30*time.Second)
		out, err := jetloopCmd(t, bin, "dlq", "show", "--server", url, seq)
		if err != nil || !strings.Contains(out, "session is cancelled") {
			t.Fatalf("jetloop dlq show %s: %v\n%s", seq, err, out)
		}
		b.checkPage()
	})

	t.Run("question", func(t *testing.T) {
		b.use(t)
		sendTo("asker", "q1", "paint the button")
		waitShow("asker/q1", "blocked")
		b.do("open the asking session", chromedp.Navigate(ready["http"]+"/ui/#/s/asker/q1"))
		b.await("the question with an answer box", `(() => { const s = document.querySelector("section.approval"); return !!s && s.querySelector("h2").textContent === "Question" && s.textContent.includes("Which colour should the button be?") && !!s.querySelector("#answer"); })()`, 30*time.Second)
		const answer = "Green, please."
		b.do("type the answer", chromedp.SendKeys(chromedp.ID("answer"), answer))
		b.do("answer and resume", chromedp.Click(chromedp.CSS(`section.approval button.primary`)))
		b.await("the session runs to done", badgeIs("done"), time.Minute)
		s := waitShow("asker/q1", "done")
		res := toolResults(s.Transcript, "ask_human")
		if len(res) != 1 || res[0]["result"] != answer || res[0]["is_error"] == true {
			t.Fatalf("ask_human results %v, want the answer typed into the page", res)
		}
		b.checkPage()
	})

	t.Run("interrupt", func(t *testing.T) {
		b.use(t)
		sendTo("slow", "n1", "list the numbers")
		b.do("open the slow session", chromedp.Navigate(ready["http"]+"/ui/#/s/slow/n1"))
		b.await("it works", badgeIs("working")+` && !document.querySelector(".actions .row button:nth-of-type(2)").disabled`, 30*time.Second)
		b.do("press Interrupt", chromedp.Click(chromedp.CSS(`.actions .row button:nth-of-type(2)`)))
		b.await("paused at the step's end", badgeIs("paused"), time.Minute)
		if got := eval[string](b, fact("Reason")); got != "interrupted" {
			t.Fatalf("paused for %q, want interrupted", got)
		}
		b.do("press Resume", chromedp.Click(chromedp.CSS(`.actions .row button:nth-of-type(1)`)))
		b.await("the session runs to done", badgeIs("done"), time.Minute)
		s := waitShow("slow/n1", "done")
		var verbs []string
		for _, e := range s.Transcript {
			if e["kind"] == "control" {
				verbs = append(verbs, e["name"].(string))
			}
		}
		if strings.Join(verbs, " ") != "interrupt resume" {
			t.Fatalf("control entries %v, want interrupt then resume", verbs)
		}
		res := toolResults(s.Transcript, "shell")
		if len(res) != 1 || res[0]["blob"] == nil {
			t.Fatalf("shell results %v, want one kept in jl_blobs", res)
		}
		// The whole output of seq 1 60000, read on demand: two pages.
		load := `.timeline li[data-kind="tool_result"] .row button`
		b.await("the result's loader", `!!document.querySelector('`+load+`')`, 30*time.Second)
		b.do("load the result", chromedp.Click(chromedp.CSS(load)))
		b.await("its first page", `document.querySelector('`+load+`').textContent.startsWith("Load more (")`, 30*time.Second)
		// The loader counts what it shows.
		first := eval[string](b, `document.querySelector('.timeline li[data-kind="tool_result"] .row + pre').textContent`)
		more := eval[string](b, `document.querySelector('`+load+`').textContent`)
		if !strings.HasPrefix(more, fmt.Sprintf("Load more (%s of ", thousands(len(first)))) {
			t.Fatalf("after its first page (%d bytes) the loader says %q", len(first), more)
		}
		b.do("load the rest", chromedp.Click(chromedp.CSS(load)))
		b.await("the whole result", `document.querySelector('`+load+`').textContent.startsWith("Whole result shown (")`, 30*time.Second)
		text := eval[string](b, `document.querySelector('.timeline li[data-kind="tool_result"] .row + pre').textContent`)
		shown := eval[string](b, `document.querySelector('`+load+`').textContent`)
		if want := fmt.Sprintf("Whole result shown (%s bytes)", thousands(len(text))); shown != want {
			t.Fatalf("the loader says %q, want %q", shown, want)
		}
		if !strings.HasPrefix(text, "1\n2\n3\n") || !strings.Contains(text, "\n29999\n30000\n30001\n") || !strings.Contains(text, "\n59999\n60000\n") {
			t.Fatalf("the loaded result (%d bytes) is not seq 1 60000: starts %.20q, ends %q", len(text), text, text[max(0, len(text)-40):])
		}
		b.checkPage()
	})

	t.Run("fork", func(t *testing.T) {
		b.use(t)
		b.do("open the first session", chromedp.Navigate(ready["http"]+"/ui/#/s/gated/s1"))
		b.await("its page", badgeIs("done")+` && !!document.querySelector("#fork-turn") && document.querySelectorAll(".timeline li").length >= 5`, 30*time.Second)
		b.do("fork at turn 1", chromedp.SendKeys(chromedp.ID("fork-turn"), "1"), chromedp.Click(chromedp.CSS(`form:has(#fork-turn) button[type="submit"]`)))
		b.await("the fork's page", `location.hash === "#/s/gated/s1-fork" && `+fact("Forked from")+` === "gated/s1 at turn 1"`, time.Minute)
		b.do("follow the link to the parent", chromedp.Click(chromedp.CSS(`.facts dd a[href="#/s/gated/s1"]`)))
		b.await("the parent's page", `location.hash === "#/s/gated/s1" && document.querySelector("h1").textContent.startsWith("gated / s1 ")`, 30*time.Second)
		s, err := show(t, bin, url, "gated/s1-fork")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Transcript) == 0 || s.Transcript[0]["text"] != "write the file" {
			t.Fatalf("the fork's transcript %v, want the parent's from its request", s.Transcript)
		}
		// The fork holds the parent's entries up to the end of turn 1, then
		// runs on its own.
		parent, err := show(t, bin, url, "gated/s1")
		if err != nil {
			t.Fatal(err)
		}
		var copied int
		for i, e := range parent.Transcript {
			if turn, _ := e["turn"].(float64); turn > 1 {
				break
			}
			if i >= len(s.Transcript) || s.Transcript[i]["kind"] != e["kind"] || s.Transcript[i]["text"] != e["text"] || s.Transcript[i]["call_id"] != e["call_id"] {
				t.Fatalf("the fork's entry %d differs from its parent's %v:\nfork: %v", i, e, s.Transcript)
			}
			copied++
		}
		if copied < 4 {
			t.Fatalf("the fork copied %d entries of turn 1, want the request, the answer, the call and its result", copied)
		}
		b.checkPage()
	})

	t.Run("schedule", func(t *testing.T) {
		b.use(t)
		row := `[...document.querySelectorAll("tbody tr")].find((tr) => tr.textContent.includes("monitor/health"))`
		b.do("open the schedules", chromedp.Navigate(ready["http"]+"/ui/#/schedules"))
		b.await("monitor/health, closed, with its next fire", `(() => { const r = `+row+`; return !!r && r.textContent.includes("closed") && r.textContent.includes("Suspend") && !!r.querySelector('td[data-label="Next fire"] time[datetime]'); })()`, 30*time.Second)
		b.do("press Suspend", chromedp.Click(chromedp.CSS(`tbody tr:has(button) td:last-child button`)))
		b.await("suspended", `(() => { const r = `+row+`; return !!r && r.textContent.includes("tripped") && r.textContent.includes("Resume"); })()`, 30*time.Second)
		out, err := jetloopCmd(t, bin, "schedules", "--server", url)
		if err != nil || !strings.Contains(out, "suspended") {
			t.Fatalf("jetloop schedules after Suspend: %v\n%s", err, out)
		}
		b.do("press Resume", chromedp.Click(chromedp.CSS(`tbody tr:has(button) td:last-child button.primary`)))
		b.await("resumed", `(() => { const r = `+row+`; return !!r && r.textContent.includes("closed") && r.textContent.includes("Suspend"); })()`, 30*time.Second)
		b.checkPage()
	})

	t.Run("delegation", func(t *testing.T) {
		b.use(t)
		natstest.WaitFor(t, 30*time.Second, func() error {
			_, err := jetloopCmd(t, bin, "send", "--server", url, "--wait", "lead", "t1", "count them")
			return err
		})
		const child = "helper/lead/t1/call_0_0"
		b.do("open the delegating session", chromedp.Navigate(ready["http"]+"/ui/#/s/lead/t1"))
		b.await("its child, answered", badgeIs("done")+` && `+fact("Delegated to")+`.includes("`+child+` done answered")`, 30*time.Second)
		b.do("follow the link to the child", chromedp.Click(chromedp.CSS(`.facts dd li a`)))
		b.await("the child's page", `location.hash === "#/s/helper/lead%2Ft1%2Fcall_0_0" && `+fact("Task")+` === "count the files" && `+fact("Delegated by")+`.startsWith("lead/t1 (call call_0_0, depth 1)")`, 30*time.Second)
		b.await("the child's answer in its timeline", `[...document.querySelectorAll('.timeline li[data-kind="assistant"]')].some((li) => li.textContent.includes("Three files."))`, 30*time.Second)
		b.do("follow the link to the parent", chromedp.Click(chromedp.CSS(`.facts dd a[href="#/s/lead/t1"]`)))
		b.await("the parent's page", `location.hash === "#/s/lead/t1" && document.querySelector("h1").textContent.startsWith("lead / t1 ")`, 30*time.Second)
		b.checkPage()
	})

	t.Run("agent versions", func(t *testing.T) {
		b.use(t)
		c, err := policies.Parse("agent.yaml", []byte(strings.Replace(helperAgent, "description: Counts.", "description: Counts, again.", 1)))
		if err != nil {
			t.Fatal(err)
		}
		putAgent(t, url, c.Definition)
		row := `[...document.querySelectorAll("tbody tr")].find((tr) => { const a = tr.querySelector('td[data-label="Agent"]'); return a && a.textContent === "helper"; })`
		b.do("open the agents", chromedp.Navigate(ready["http"]+"/ui/#/agents"))
		natstest.WaitFor(t, 30*time.Second, func() error {
			b.do("read them again", chromedp.Reload())
			b.await("the agents", `!!document.querySelector("tbody")`, 30*time.Second)
			if v := eval[string](b, `(() => { const r = `+row+`; return r ? r.querySelector('td[data-label="Version"]').textContent : ""; })()`); v != "v2" {
				return fmt.Errorf("helper listed at %q, want v2", v)
			}
			return nil
		})
		b.do("open its versions", chromedp.Click(chromedp.CSS(`tbody tr:has(a[href="#/sessions?agent=helper"]) button[aria-expanded]`)))
		b.await("its history, newest first", `(() => { const t = [...document.querySelectorAll("table table, td table")].find((t) => t.querySelector("caption").textContent.startsWith("Versions of helper")); if (!t) return false; const v = [...t.querySelectorAll('td[data-label="Version"]')].map((td) => td.textContent); return v.join(" ") === "v2 v1"; })()`, 30*time.Second)
		b.checkPage()
	})

	// Text from a session (its name, a message, the model's answer, a
	// tool's result) is shown as text: markup in it builds no element
	// and runs nothing.
	t.Run("hostile text", func(t *testing.T) {
		b.use(t)
		c, err := policies.Parse("hostile.yaml", []byte(hostileAgent))
		if err != nil {
			t.Fatal(err)
		}
		putAgent(t, url, c.Definition)
		const name = `q"u'ote<i>`
		const message = `<img src=x onerror="window.__xss=1">`
		sendTo("hostile", name, message)
		waitShow("hostile/"+name, "done")
		b.do("open the session", chromedp.Navigate(ready["http"]+`/ui/#/s/hostile/q%22u'ote%3Ci%3E`))
		b.await("the tool's result as text", `[...document.querySelectorAll('.timeline li[data-kind="tool_result"]')].some((li) => li.textContent.includes("<img src=x onerror=window.__xss=2>"))`, 30*time.Second)
		b.await("the message and the answer as text", `document.querySelector(".timeline").textContent.includes(`+"`"+message+"`"+`) && document.querySelector(".timeline").textContent.includes("<b>bold</b>")`, 30*time.Second)
		if got := eval[string](b, `document.querySelector("h1").textContent`); !strings.Contains(got, name) {
			t.Fatalf("heading %q, want the session's name %q as it is", got, name)
		}
		if n := eval[int](b, `document.querySelectorAll("main img, main b, main i, main [onerror]").length`); n != 0 {
			t.Fatalf("%d elements built from the session's text", n)
		}
		b.do("open the list of its agent", chromedp.Navigate(ready["http"]+"/ui/#/sessions?agent=hostile"))
		b.await("the session in the list", `[...document.querySelectorAll("tr[data-key]")].some((r) => r.dataset.key === `+"`hostile/"+name+"`"+`)`, 30*time.Second)
		if eval[bool](b, `window.__xss !== undefined || document.querySelectorAll("main img, main i").length > 0`) {
			t.Fatal("markup of the session's text ran or built an element")
		}
		b.checkPage()
	})

	// Served over plain HTTP under a name that is not loopback (a
	// deployment without TLS), the page is no secure context: signing
	// in with the token and acting still work.
	t.Run("insecure origin", func(t *testing.T) {
		token, err := os.ReadFile(filepath.Join(data, "api-token"))
		if err != nil {
			t.Fatal(err)
		}
		host := "http://jetloop.test:" + ready["http"][strings.LastIndexByte(ready["http"], ':')+1:]
		b := newBrowser(t, path, chromedp.Flag("host-resolver-rules", "MAP jetloop.test 127.0.0.1"))
		b.do("open the login form", chromedp.Navigate(host+"/ui/login"))
		b.await("the form, in no secure context", `!!document.querySelector("#token") && window.isSecureContext === false`, 30*time.Second)
		b.do("sign in with the token", chromedp.SendKeys(chromedp.ID("token"), strings.TrimSpace(string(token))), chromedp.Submit(chromedp.ID("token")),
			chromedp.WaitVisible(chromedp.CSS("header.top")))
		b.await("signed in", `location.pathname === "/ui/" && !!document.querySelector("h1")`, 30*time.Second)
		row := `[...document.querySelectorAll("tbody tr")].find((tr) => tr.textContent.includes("monitor/health"))`
		b.do("open the schedules", chromedp.Navigate(host+"/ui/#/schedules"))
		b.await("monitor/health", `(() => { const r = `+row+`; return !!r && r.textContent.includes("Suspend"); })()`, 30*time.Second)
		b.do("press Suspend", chromedp.Click(chromedp.CSS(`tbody tr:has(button) td:last-child button`)))
		b.await("suspended", `(() => { const r = `+row+`; return !!r && r.textContent.includes("Resume"); })()`, 30*time.Second)
		b.do("press Resume", chromedp.Click(chromedp.CSS(`tbody tr:has(button) td:last-child button.primary`)))
		b.await("resumed", `(() => { const r = `+row+`; return !!r && r.textContent.includes("Suspend"); })()`, 30*time.Second)
		b.checkPage()
		b.do("sign out", chromedp.Click(chromedp.CSS(`form.signout button`)), chromedp.WaitVisible(chromedp.ID("token")))
		b.await("signed out", `location.pathname === "/ui/login"`, 30*time.Second)
		b.await("the API refuses the signed-out browser", `(() => { if (window.__after === undefined) { window.__after = 0; fetch("/v1/agents").then((r) => { window.__after = r.status; }); } return window.__after === 401; })()`, 30*time.Second)
	})

	t.Run("views", func(t *testing.T) {
		b.use(t)
		for _, v := range []struct{ hash, ready string }{
			{"#/agents", `document.querySelector("h1").textContent === "Agents" && document.querySelector("tbody") && document.querySelector("tbody").textContent.includes("gated")`},
			{"#/schedules", `document.querySelector("h1").textContent === "Schedules" && document.querySelector("tbody") && document.querySelector("tbody").textContent.includes("monitor/health")`},
			{"#/events", `document.querySelector("h1").textContent.startsWith("Admission decisions") && document.querySelector("tbody") && document.querySelector("tbody").textContent.includes("gated")`},
			{"#/dlq", `document.querySelector("h1").textContent === "Dead letters" && !!document.querySelector("main p, main table")`},
			{"#/sessions?status=done", `document.querySelector('tr[data-key="gated/s1"]') !== null && document.querySelector('tr[data-key="gated/s2"]') !== null`},
		} {
			b.do("open "+v.hash, chromedp.Navigate(ready["http"]+"/ui/"+v.hash))
			b.await(v.hash, v.ready, 30*time.Second)
			// Nothing the page loaded came from another origin.
			if other := eval[[]string](b, `performance.getEntriesByType("resource").map((e) => e.name).filter((u) => !u.startsWith(location.origin + "/"))`); len(other) > 0 {
				t.Fatalf("%s: loaded from elsewhere: %v", v.hash, other)
			}
			// Every control is labelled, for keyboards and screen readers.
			if bad := eval[[]string](b, `[...document.querySelectorAll("input:not([type=hidden]), select, textarea")].filter((el) => !el.labels.length && !el.getAttribute("aria-label")).map((el) => el.outerHTML)`); len(bad) > 0 {
				t.Fatalf("%s: controls without a label: %v", v.hash, bad)
			}
		}
		b.do("open the context", chromedp.Navigate(ready["http"]+"/ui/#/s/gated/s1"))
		b.await("the session page, read", `document.querySelectorAll(".timeline li").length >= 5`, 30*time.Second)
		// By keyboard: the summary takes the focus and Enter opens it.
		b.do("expand the context", chromedp.Focus(chromedp.CSS(`details.panel summary`)), chromedp.KeyEvent(kb.Enter))
		b.await("the next call's context, part by part", `[...document.querySelectorAll("details.panel tbody tr")].length >= 3`, 30*time.Second)
		b.checkPage()
	})

	t.Run("phone", func(t *testing.T) {
		b.use(t)
		b.do("a phone-sized screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(ready["http"]+"/ui/#/sessions"))
		b.await("the list", `document.querySelector('tr[data-key="gated/s1"]') !== null`, 30*time.Second)
		if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
			t.Fatalf("the list is %dpx wider than a phone's screen", w)
		}
		b.do("a session", chromedp.Navigate(ready["http"]+"/ui/#/s/gated/s1"))
		b.await("its timeline", `document.querySelectorAll(".timeline li").length >= 5`, 30*time.Second)
		if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
			t.Fatalf("the session page is %dpx wider than a phone's screen", w)
		}
		b.checkPage()
	})
}

// dashboardLink reads the one-time link `jetloop dev` prints after its
// ready line.
func dashboardLink(t *testing.T, p *proc) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-p.lines:
			if rest, ok := strings.CutPrefix(line, "jetloop dashboard "); ok {
				return strings.Fields(rest)[0]
			}
		case <-timeout:
			t.Fatalf("no dashboard link printed\nstderr:\n%s", p.Stderr())
		}
	}
}

// thousands formats n as the page does (en-US: 348,907).
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
