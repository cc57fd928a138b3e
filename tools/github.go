package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v89/github"

	"github.com/jetloop/jetloop/ghapp"
)

// DefaultProbeSkew is how far before a call's intent a GitHub probe
// looks, for clocks that disagree.
const DefaultProbeSkew = 5 * time.Minute

// GitHubConfig configures the GitHub tools.
type GitHubConfig struct {
	// Clients makes the requests and holds the installation tokens and
	// rate limits every session of the worker shares. Required.
	Clients *ghapp.Clients
	// ProbeSkew is how far before a call's intent its probe looks
	// (default DefaultProbeSkew).
	ProbeSkew time.Duration
}

// GitHub returns the GitHub tools: github_comment, github_review and
// github_check, whose probes find their effect by the call's marker, and
// github_label, which is replay-safe. repo and number default to the
// run's event (Call.Thread); the credentials are the agent's github:
// settings over the deployment's (see ghapp.Resolve).
func GitHub(cfg GitHubConfig) []Tool {
	if cfg.ProbeSkew <= 0 {
		cfg.ProbeSkew = DefaultProbeSkew
	}
	g := &gitHub{cfg: cfg}
	return []Tool{&ghComment{g}, &ghReview{g}, &ghCheck{g}, &ghLabel{g}}
}

type gitHub struct{ cfg GitHubConfig }

const repoNumberProps = `
		"repo": {
			"type": "string",
			"pattern": "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$",
			"description": "The repository, owner/name. Default: the repository of the event that started this run."
		},
		"number": {
			"type": "integer",
			"minimum": 1,
			"description": "The issue or pull request number. Default: the one of the event that started this run."
		}`

// target is what a GitHub call acts on.
type target struct {
	repo, owner, name string
	number            int
	installation      int64
}

// target resolves repo and number against the run's event; needNumber
// says the call acts on an issue or pull request.
func (g *gitHub) target(call Call, repo string, number int, needNumber bool) (target, error) {
	var t target
	th := call.Thread
	switch {
	case repo != "":
		t.repo = repo
	case th != nil && th.Repo != "":
		t.repo = th.Repo
	default:
		return t, errors.New("no repository: the event that started this run names none; pass repo (owner/name)")
	}
	sameRepo := th != nil && strings.EqualFold(th.Repo, t.repo)
	t.number = number
	if t.number == 0 && sameRepo {
		t.number = th.Number
	}
	if needNumber && t.number == 0 {
		return t, fmt.Errorf("no issue or pull request number: the event that started this run names none in %s; pass number", t.repo)
	}
	if sameRepo {
		t.installation = th.Installation
	}
	var err error
	t.owner, t.name, err = ghapp.SplitRepo(t.repo)
	return t, err
}

func (g *gitHub) client(ctx context.Context, call Call, t target) (*ghapp.Client, error) {
	return g.cfg.Clients.For(ctx, call.GitHub, ghapp.Target{Repo: t.repo, Installation: t.installation})
}

// failure turns an error of a GitHub call into the model's result, or
// into the runtime's error when the call's context ended.
func failure(ctx context.Context, tool string, err error) (Result, error) {
	if ctx.Err() != nil {
		return Result{}, err
	}
	var rl *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var ours *ghapp.RateLimitError
	switch {
	case errors.As(err, &ours):
		return Result{IsError: true, Content: fmt.Sprintf("%s: nothing was sent: %v", tool, ours)}, nil
	case errors.As(err, &rl):
		return Result{IsError: true, Content: fmt.Sprintf("%s: nothing was done: GitHub rate limit; resets at %s", tool, rl.Rate.Reset.UTC().Format(time.RFC3339))}, nil
	case errors.As(err, &abuse):
		return Result{IsError: true, Content: fmt.Sprintf("%s: nothing was done: GitHub secondary rate limit; retry after %s", tool, abuse.GetRetryAfter())}, nil
	}
	return Result{IsError: true, Content: fmt.Sprintf("%s: %v", tool, err)}, nil
}

// unanswered reports whether err leaves open whether GitHub made a
// write: no answer came (a timeout, a dropped connection, an answer that
// does not parse) or a 5xx, which GitHub gives for some writes it stored.
// A 4xx, a rate limit and a request never sent made nothing.
func unanswered(err error) bool {
	var er *github.ErrorResponse
	switch {
	case rateLimited(err):
		return false
	case errors.As(err, &er):
		return er.Response == nil || er.Response.StatusCode >= 500
	}
	return true
}

// lookAfter answers a write that failed with err: when err leaves open
// whether GitHub stored it, the call's probe looks for its marker, so the
// model hears that the comment is there (with its id and URL) rather than
// a failure it would make again, posting twice; else, or when the probe
// finds nothing, the failure, saying whether it was looked for.
func lookAfter(ctx context.Context, tool string, err error, call Call, p Prober) (Result, error) {
	if ctx.Err() != nil || !unanswered(err) {
		return failure(ctx, tool, err)
	}
	res, found, perr := p.Probe(ctx, call)
	switch {
	case ctx.Err() != nil:
		return failure(ctx, tool, err)
	case perr != nil:
		return Result{IsError: true, Content: fmt.Sprintf("%s: %v; whether GitHub made it could not be looked up (%v): look before making it again", tool, err, perr)}, nil
	case found:
		return res, nil
	}
	return Result{IsError: true, Content: fmt.Sprintf("%s: %v; GitHub holds nothing with this call's marker", tool, err)}, nil
}

// rateLimited reports whether err is a rate limit of GitHub's (or one
// the clients hold requests back for).
func rateLimited(err error) bool {
	var rl *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var ours *ghapp.RateLimitError
	return errors.As(err, &rl) || errors.As(err, &abuse) || errors.As(err, &ours)
}

// probeFailed is a probe's error: ErrProbeLater with a rate limit.
func probeFailed(err error) error {
	if rateLimited(err) {
		return fmt.Errorf("%w: %w", ErrProbeLater, err)
	}
	return err
}

// ours reports whether u is the account c writes as. Anyone who can
// comment can write a marker (a call id is no secret: a model's, or the
// runtime's call_<n>): only the tool's own writes say the call ran.
//
// A token with no user (an App's installation token given as a token)
// cannot say whose account it is: then a bot's write is taken as the
// tool's, which only another App installed on the repository could fake.
func ours(ctx context.Context, c *ghapp.Client, u *github.User) (bool, error) {
	login, err := c.Login(ctx)
	if errors.Is(err, ghapp.ErrUnknownLogin) {
		return u.GetType() == "Bot", nil
	}
	if err != nil {
		return false, fmt.Errorf("who writes as %s: %w", c.From, err)
	}
	return strings.EqualFold(u.GetLogin(), login), nil
}

// withMarker appends the call's marker to a body.
func withMarker(body string, call Call) string {
	if body == "" {
		return MarkerComment(call)
	}
	return strings.TrimRight(body, "\n") + "\n\n" + MarkerComment(call)
}

func decodeArgs(tool string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: arguments: %w: %w", tool, ErrInvalidArgs, err)
	}
	return nil
}

// ---- github_comment

type ghComment struct{ g *gitHub }

type commentArgs struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Body   string `json:"body"`
}

func (t *ghComment) Spec() Spec {
	return Spec{
		Name: "github_comment",
		Description: "Post a comment on a GitHub issue or pull request. repo and number default to the issue or pull " +
			"request of the event that started this run. Markdown is rendered. Answers the comment's id and URL.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {` + repoNumberProps + `,
		"body": {"type": "string", "minLength": 1, "maxLength": 60000, "description": "The comment, in GitHub Markdown."}
	},
	"required": ["body"],
	"additionalProperties": false
}`),
		State:   Resource,
		Timeout: 5 * time.Minute,
	}
}

func (t *ghComment) Call(ctx context.Context, call Call) (Result, error) {
	var a commentArgs
	if err := decodeArgs("github_comment", call.Args, &a); err != nil {
		return Result{}, err
	}
	tg, err := t.g.target(call, a.Repo, a.Number, true)
	if err != nil {
		return Result{IsError: true, Content: "github_comment: " + err.Error()}, nil
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return failure(ctx, "github_comment", err)
	}
	body := withMarker(a.Body, call)
	cm, _, err := c.Issues.CreateComment(ctx, tg.owner, tg.name, tg.number, &github.IssueComment{Body: &body})
	if err != nil {
		return lookAfter(ctx, "github_comment", err, call, t)
	}
	return commentResult(tg, cm), nil
}

func commentResult(tg target, cm *github.IssueComment) Result {
	return Result{Content: fmt.Sprintf("posted comment %d on %s#%d: %s", cm.GetID(), tg.repo, tg.number, cm.GetHTMLURL())}
}

// Probe looks for a comment carrying the call's marker among those made
// on the issue since the call's intent by the account the tool writes as.
func (t *ghComment) Probe(ctx context.Context, call Call) (Result, bool, error) {
	var a commentArgs
	if err := decodeArgs("github_comment", call.Args, &a); err != nil {
		return Result{}, false, err
	}
	tg, err := t.g.target(call, a.Repo, a.Number, true)
	if err != nil {
		// The call could not have posted anything.
		return Result{}, false, nil
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return Result{}, false, probeFailed(err)
	}
	marker := MarkerComment(call)
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	if !call.Started.IsZero() {
		since := call.Started.Add(-t.g.cfg.ProbeSkew)
		opts.Since = &since
	}
	for cm, err := range c.Issues.ListCommentsIter(ctx, tg.owner, tg.name, tg.number, opts) {
		if err != nil {
			return Result{}, false, probeFailed(fmt.Errorf("list comments of %s#%d: %w", tg.repo, tg.number, err))
		}
		if !strings.Contains(cm.GetBody(), marker) {
			continue
		}
		if mine, err := ours(ctx, c, cm.GetUser()); err != nil || mine {
			return commentResult(tg, cm), mine, probeFailed(err)
		}
	}
	return Result{}, false, nil
}

// ---- github_review

type ghReview struct{ g *gitHub }

type reviewArgs struct {
	Repo     string `json:"repo"`
	Number   int    `json:"number"`
	Body     string `json:"body"`
	Event    string `json:"event"`
	Comments []struct {
		Path      string `json:"path"`
		Line      int    `json:"line"`
		Side      string `json:"side"`
		StartLine int    `json:"start_line"`
		Body      string `json:"body"`
	} `json:"comments"`
}

func (t *ghReview) Spec() Spec {
	return Spec{
		Name: "github_review",
		Description: "Submit a review of a GitHub pull request: a body, a verdict (APPROVE, REQUEST_CHANGES or COMMENT) " +
			"and optional comments on lines of the diff. repo and number default to the pull request of the event " +
			"that started this run. Answers the review's id and URL.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {` + repoNumberProps + `,
		"body": {"type": "string", "maxLength": 60000, "description": "The review's summary, in GitHub Markdown (required for REQUEST_CHANGES and COMMENT)."},
		"event": {"type": "string", "enum": ["APPROVE", "REQUEST_CHANGES", "COMMENT"], "description": "The verdict."},
		"comments": {
			"type": "array",
			"maxItems": 50,
			"items": {
				"type": "object",
				"properties": {
					"path": {"type": "string", "minLength": 1, "description": "The file, relative to the repository root."},
					"line": {"type": "integer", "minimum": 1, "description": "The line of the diff's new (RIGHT) or old (LEFT) side."},
					"side": {"type": "string", "enum": ["LEFT", "RIGHT"]},
					"start_line": {"type": "integer", "minimum": 1, "description": "First line of a multi-line comment."},
					"body": {"type": "string", "minLength": 1, "maxLength": 10000}
				},
				"required": ["path", "line", "body"],
				"additionalProperties": false
			}
		}
	},
	"required": ["event"],
	"additionalProperties": false
}`),
		State:   Resource,
		Timeout: 5 * time.Minute,
	}
}

func (t *ghReview) Call(ctx context.Context, call Call) (Result, error) {
	var a reviewArgs
	if err := decodeArgs("github_review", call.Args, &a); err != nil {
		return Result{}, err
	}
	if a.Body == "" && a.Event != "APPROVE" {
		return Result{IsError: true, Content: fmt.Sprintf("github_review: body is required with event %s", a.Event)}, nil
	}
	tg, err := t.g.target(call, a.Repo, a.Number, true)
	if err != nil {
		return Result{IsError: true, Content: "github_review: " + err.Error()}, nil
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return failure(ctx, "github_review", err)
	}
	body := withMarker(a.Body, call)
	req := &github.PullRequestReviewRequest{Body: &body, Event: &a.Event}
	for _, cm := range a.Comments {
		d := &github.DraftReviewComment{Path: github.Ptr(cm.Path), Line: github.Ptr(cm.Line), Body: github.Ptr(cm.Body)}
		if cm.Side != "" {
			d.Side = github.Ptr(cm.Side)
		}
		if cm.StartLine != 0 {
			d.StartLine = github.Ptr(cm.StartLine)
		}
		req.Comments = append(req.Comments, d)
	}
	rv, _, err := c.PullRequests.CreateReview(ctx, tg.owner, tg.name, tg.number, req)
	if err != nil {
		return lookAfter(ctx, "github_review", err, call, t)
	}
	return reviewResult(tg, rv), nil
}

func reviewResult(tg target, rv *github.PullRequestReview) Result {
	return Result{Content: fmt.Sprintf("posted review %d (%s) on %s#%d: %s", rv.GetID(), rv.GetState(), tg.repo, tg.number, rv.GetHTMLURL())}
}

// Probe looks for a review carrying the call's marker on the pull request,
// submitted since the call's intent by the account the tool writes as.
func (t *ghReview) Probe(ctx context.Context, call Call) (Result, bool, error) {
	var a reviewArgs
	if err := decodeArgs("github_review", call.Args, &a); err != nil {
		return Result{}, false, err
	}
	tg, err := t.g.target(call, a.Repo, a.Number, true)
	if err != nil {
		return Result{}, false, nil
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return Result{}, false, probeFailed(err)
	}
	marker := MarkerComment(call)
	var since time.Time
	if !call.Started.IsZero() {
		since = call.Started.Add(-t.g.cfg.ProbeSkew)
	}
	for rv, err := range c.PullRequests.ListReviewsIter(ctx, tg.owner, tg.name, tg.number, &github.ListOptions{PerPage: 100}) {
		if err != nil {
			return Result{}, false, probeFailed(fmt.Errorf("list reviews of %s#%d: %w", tg.repo, tg.number, err))
		}
		if !strings.Contains(rv.GetBody(), marker) || rv.GetSubmittedAt().Before(since) {
			continue
		}
		if mine, err := ours(ctx, c, rv.GetUser()); err != nil || mine {
			return reviewResult(tg, rv), mine, probeFailed(err)
		}
	}
	return Result{}, false, nil
}

// ---- github_check

type ghCheck struct{ g *gitHub }

type checkArgs struct {
	Repo       string `json:"repo"`
	HeadSHA    string `json:"head_sha"`
	CheckRunID int64  `json:"check_run_id"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion"`
	Title      string `json:"title"`
	Summary    string `json:"summary"`
	Text       string `json:"text"`
	DetailsURL string `json:"details_url"`
}

func (t *ghCheck) Spec() Spec {
	return Spec{
		Name: "github_check",
		Description: "Create a GitHub check run on a commit, or update one by check_run_id: a name, a status, a " +
			"conclusion and a summary shown on the pull request. repo and head_sha default to the event that " +
			"started this run. Answers the check run's id and URL.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"repo": {
			"type": "string",
			"pattern": "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$",
			"description": "The repository, owner/name. Default: the repository of the event that started this run."
		},
		"head_sha": {"type": "string", "pattern": "^[0-9a-f]{40}$", "description": "The commit. Default: the head commit of the event that started this run."},
		"check_run_id": {"type": "integer", "minimum": 1, "description": "Update this check run instead of creating one."},
		"name": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The check's name (required to create one)."},
		"status": {"type": "string", "enum": ["queued", "in_progress", "completed"]},
		"conclusion": {"type": "string", "enum": ["action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"], "description": "Sets status completed."},
		"title": {"type": "string", "maxLength": 1000, "description": "The output's title (default: the name, else Result)."},
		"summary": {"type": "string", "maxLength": 65535, "description": "The output's summary, in Markdown."},
		"text": {"type": "string", "maxLength": 65535, "description": "The output's details, in Markdown."},
		"details_url": {"type": "string", "format": "uri"}
	},
	"additionalProperties": false
}`),
		State:   Resource,
		Timeout: 5 * time.Minute,
	}
}

func (a checkArgs) output() *github.CheckRunOutput {
	if a.Summary == "" && a.Text == "" && a.Title == "" {
		return nil
	}
	title := a.Title
	if title == "" {
		title = a.Name
	}
	if title == "" {
		title = "Result"
	}
	o := &github.CheckRunOutput{Title: github.Ptr(title), Summary: github.Ptr(a.Summary)}
	if a.Text != "" {
		o.Text = github.Ptr(a.Text)
	}
	return o
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (t *ghCheck) Call(ctx context.Context, call Call) (Result, error) {
	var a checkArgs
	if err := decodeArgs("github_check", call.Args, &a); err != nil {
		return Result{}, err
	}
	tg, err := t.g.target(call, a.Repo, 0, false)
	if err != nil {
		return Result{IsError: true, Content: "github_check: " + err.Error()}, nil
	}
	if out := a.output(); out != nil && out.GetSummary() == "" {
		return Result{IsError: true, Content: "github_check: summary is required with title or text"}, nil
	}
	if a.CheckRunID == 0 {
		if a.Name == "" {
			return Result{IsError: true, Content: "github_check: name is required to create a check run"}, nil
		}
		if a.HeadSHA == "" && call.Thread != nil && strings.EqualFold(call.Thread.Repo, tg.repo) {
			a.HeadSHA = call.Thread.HeadSHA
		}
		if a.HeadSHA == "" {
			return Result{IsError: true, Content: "github_check: no commit: the event that started this run names none; pass head_sha"}, nil
		}
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return failure(ctx, "github_check", err)
	}
	var cr *github.CheckRun
	verb := "created"
	if a.CheckRunID != 0 {
		verb = "updated"
		cr, _, err = c.Checks.UpdateCheckRun(ctx, tg.owner, tg.name, a.CheckRunID, github.UpdateCheckRunOptions{
			Name: a.Name, Status: opt(a.Status), Conclusion: opt(a.Conclusion), Output: a.output(), DetailsURL: opt(a.DetailsURL)})
	} else {
		cr, _, err = c.Checks.CreateCheckRun(ctx, tg.owner, tg.name, github.CreateCheckRunOptions{
			Name: a.Name, HeadSHA: a.HeadSHA, ExternalID: github.Ptr(Marker(call)),
			Status: opt(a.Status), Conclusion: opt(a.Conclusion), Output: a.output(), DetailsURL: opt(a.DetailsURL)})
	}
	if err != nil && a.CheckRunID == 0 {
		return lookAfter(ctx, "github_check", err, call, t)
	}
	if err != nil {
		// An update made again sets the same fields.
		return failure(ctx, "github_check", err)
	}
	return checkResult(verb, tg, cr), nil
}

func checkResult(verb string, tg target, cr *github.CheckRun) Result {
	state := cr.GetStatus()
	if cr.GetConclusion() != "" {
		state += "/" + cr.GetConclusion()
	}
	return Result{Content: fmt.Sprintf("%s check run %d %q (%s) on %s@%s: %s", verb, cr.GetID(), cr.GetName(), state, tg.repo, cr.GetHeadSHA(), cr.GetHTMLURL())}
}

// Probe looks for a check run whose external_id is the call's marker,
// created by the App the tool writes as. An update is not looked for:
// made again, it sets the same fields.
func (t *ghCheck) Probe(ctx context.Context, call Call) (Result, bool, error) {
	var a checkArgs
	if err := decodeArgs("github_check", call.Args, &a); err != nil {
		return Result{}, false, err
	}
	tg, err := t.g.target(call, a.Repo, 0, false)
	if err != nil || a.CheckRunID != 0 || a.Name == "" {
		return Result{}, false, nil
	}
	if a.HeadSHA == "" && call.Thread != nil && strings.EqualFold(call.Thread.Repo, tg.repo) {
		a.HeadSHA = call.Thread.HeadSHA
	}
	if a.HeadSHA == "" {
		return Result{}, false, nil
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return Result{}, false, probeFailed(err)
	}
	marker := Marker(call)
	opts := &github.ListCheckRunsOptions{CheckName: github.Ptr(a.Name), Filter: github.Ptr("all"), ListOptions: github.ListOptions{PerPage: 100}}
	for cr, err := range c.Checks.ListCheckRunsForRefIter(ctx, tg.owner, tg.name, a.HeadSHA, opts) {
		if err != nil {
			return Result{}, false, probeFailed(fmt.Errorf("list check runs of %s@%s: %w", tg.repo, a.HeadSHA, err))
		}
		// Only Apps create check runs; another App's is not the call's.
		if cr.GetExternalID() == marker && (c.AppID == 0 || cr.GetApp().GetID() == c.AppID) {
			return checkResult("created", tg, cr), true, nil
		}
	}
	return Result{}, false, nil
}

// ---- github_label

type ghLabel struct{ g *gitHub }

type labelArgs struct {
	Repo   string   `json:"repo"`
	Number int      `json:"number"`
	Add    []string `json:"add"`
	Remove []string `json:"remove"`
}

func (t *ghLabel) Spec() Spec {
	return Spec{
		Name: "github_label",
		Description: "Add labels to and remove labels from a GitHub issue or pull request. repo and number default " +
			"to the issue or pull request of the event that started this run. Answers the labels it has after.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {` + repoNumberProps + `,
		"add": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 50}, "maxItems": 20},
		"remove": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 50}, "maxItems": 20}
	},
	"anyOf": [{"required": ["add"]}, {"required": ["remove"]}],
	"additionalProperties": false
}`),
		// Adding a label it has, or removing one it lacks, changes nothing.
		ReplaySafe: true,
		State:      Resource,
		Timeout:    5 * time.Minute,
	}
}

func (t *ghLabel) Call(ctx context.Context, call Call) (Result, error) {
	var a labelArgs
	if err := decodeArgs("github_label", call.Args, &a); err != nil {
		return Result{}, err
	}
	if len(a.Add) == 0 && len(a.Remove) == 0 {
		return Result{IsError: true, Content: "github_label: nothing to do: pass add or remove"}, nil
	}
	tg, err := t.g.target(call, a.Repo, a.Number, true)
	if err != nil {
		return Result{IsError: true, Content: "github_label: " + err.Error()}, nil
	}
	c, err := t.g.client(ctx, call, tg)
	if err != nil {
		return failure(ctx, "github_label", err)
	}
	var labels []*github.Label
	if len(a.Add) > 0 {
		if labels, _, err = c.Issues.AddLabelsToIssue(ctx, tg.owner, tg.name, tg.number, a.Add); err != nil {
			return failure(ctx, "github_label", err)
		}
	}
	for _, l := range a.Remove {
		if _, err := c.Issues.RemoveLabelForIssue(ctx, tg.owner, tg.name, tg.number, l); err != nil && !ghapp.IsNotFound(err) {
			return failure(ctx, "github_label", err)
		}
	}
	if len(a.Remove) > 0 {
		if labels, _, err = c.Issues.ListLabelsByIssue(ctx, tg.owner, tg.name, tg.number, &github.ListOptions{PerPage: 100}); err != nil {
			return failure(ctx, "github_label", err)
		}
	}
	names := make([]string, 0, len(labels))
	for _, l := range labels {
		names = append(names, l.GetName())
	}
	return Result{Content: fmt.Sprintf("labels of %s#%d: %s", tg.repo, tg.number, strings.Join(names, ", "))}, nil
}
