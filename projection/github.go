package projection

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of the GitHub projections.
const (
	// BodyBytes bounds a body, comment or summary in a projection; the
	// rest is cut with a note naming its size.
	BodyBytes = 2 << 10
	// MaxCommits is how many of a push's commits are listed.
	MaxCommits = 20
	// MaxListed bounds the labels, reviewers, pull requests and other
	// lists a projection names.
	MaxListed = 20
)

// GitHubPrefix prefixes the CloudEvents type of every GitHub delivery.
const GitHubPrefix = "com.github."

// GitHubKind splits a GitHub delivery's type, com.github.<event>[.<action>],
// into the X-GitHub-Event name and the action; ok is false for any other
// type.
func GitHubKind(typ string) (name, action string, ok bool) {
	rest, ok := strings.CutPrefix(typ, GitHubPrefix)
	if !ok || rest == "" {
		return "", "", false
	}
	name, action, _ = strings.Cut(rest, ".")
	return name, action, true
}

// GitHub returns the compact projection of a GitHub delivery: what a
// reviewer or a monitor acts on (action, repository, number, title,
// author, URL, a body cut to BodyBytes, the refs and commits of a push,
// the outcome of a check) instead of the whole webhook body, which
// repeats every object's forty URLs. ok is false when typ is not a GitHub
// type or data is not a JSON object. Kinds without a projection of their
// own get the common fields and the names of the payload's other
// top-level fields.
func GitHub(typ string, data any) (out map[string]any, ok bool) {
	name, action, ok := GitHubKind(typ)
	d, isMap := data.(map[string]any)
	if !ok || !isMap {
		return nil, false
	}
	p := proj{}
	p.set("event", name)
	p.set("action", action)
	p.set("repository", str(d, "repository", "full_name"))
	p.set("sender", str(d, "sender", "login"))
	switch name {
	case "pull_request":
		pullRequest(p, d, action)
	case "pull_request_review":
		p.pull(get(d, "pull_request"))
		r := get(d, "review")
		p.set("review", compact(map[string]any{
			"state": str(r, "state"), "author": str(r, "user", "login"),
			"body": body(str(r, "body")), "url": str(r, "html_url"), "commit": str(r, "commit_id"),
		}))
	case "pull_request_review_comment":
		p.pull(get(d, "pull_request"))
		p.set("comment", reviewComment(get(d, "comment")))
	case "pull_request_review_thread":
		p.pull(get(d, "pull_request"))
		th := get(d, "thread")
		var comments []any
		for _, c := range list(th, "comments") {
			comments = append(comments, reviewComment(c))
		}
		p.set("thread", compact(map[string]any{"comments": comments}))
	case "issue_comment":
		issue(p, get(d, "issue"))
		c := get(d, "comment")
		p.set("comment", compact(map[string]any{
			"author": str(c, "user", "login"), "body": body(str(c, "body")), "url": str(c, "html_url"), "id": get(c, "id"),
		}))
		if action == "edited" {
			p.set("previous_body", body(str(d, "changes", "body", "from")))
		}
	case "issues":
		issue(p, get(d, "issue"))
		issueExtras(p, d, action)
	case "push":
		push(p, d)
	case "check_run":
		cr := get(d, "check_run")
		p.set("check_run", compact(map[string]any{
			"name": str(cr, "name"), "status": str(cr, "status"), "conclusion": get(cr, "conclusion"),
			"head_sha": str(cr, "head_sha"), "url": str(cr, "html_url"),
			"title": str(cr, "output", "title"), "summary": body(str(cr, "output", "summary")),
			"annotations":   get(cr, "output", "annotations_count"),
			"pull_requests": numbers(list(cr, "pull_requests")),
		}))
		p.set("requested_action", str(d, "requested_action", "identifier"))
	case "check_suite":
		cs := get(d, "check_suite")
		p.set("check_suite", compact(map[string]any{
			"status": str(cs, "status"), "conclusion": get(cs, "conclusion"), "head_branch": str(cs, "head_branch"),
			"head_sha": str(cs, "head_sha"), "app": str(cs, "app", "name"), "pull_requests": numbers(list(cs, "pull_requests")),
		}))
	case "workflow_run":
		wr := get(d, "workflow_run")
		p.set("workflow_run", compact(map[string]any{
			"name": first(str(wr, "name"), str(d, "workflow", "name")), "title": str(wr, "display_title"),
			"status": str(wr, "status"), "conclusion": get(wr, "conclusion"), "event": str(wr, "event"),
			"head_branch": str(wr, "head_branch"), "head_sha": str(wr, "head_sha"), "run_number": get(wr, "run_number"),
			"attempt": get(wr, "run_attempt"), "url": str(wr, "html_url"), "actor": str(wr, "actor", "login"),
			"pull_requests": numbers(list(wr, "pull_requests")),
		}))
	case "workflow_job":
		j := get(d, "workflow_job")
		p.set("workflow_job", compact(map[string]any{
			"name": str(j, "name"), "workflow": str(j, "workflow_name"), "status": str(j, "status"),
			"conclusion": get(j, "conclusion"), "head_branch": str(j, "head_branch"), "head_sha": str(j, "head_sha"),
			"url": str(j, "html_url"), "runner": str(j, "runner_name"),
		}))
	case "release":
		r := get(d, "release")
		p.set("release", compact(map[string]any{
			"tag": str(r, "tag_name"), "name": str(r, "name"), "author": str(r, "author", "login"),
			"draft": get(r, "draft"), "prerelease": get(r, "prerelease"), "url": str(r, "html_url"), "body": body(str(r, "body")),
		}))
	case "create", "delete":
		p.set("ref", str(d, "ref"))
		p.set("ref_type", str(d, "ref_type"))
	case "installation", "installation_repositories":
		in := get(d, "installation")
		p.set("installation", compact(map[string]any{"id": get(in, "id"), "account": str(in, "account", "login")}))
		var repos []any
		for _, key := range []string{"repositories", "repositories_added", "repositories_removed"} {
			for _, r := range list(d, key) {
				if len(repos) < MaxListed {
					repos = append(repos, str(r, "full_name"))
				}
			}
		}
		p.set("repositories", repos)
	default:
		var other []string
		for k := range d {
			switch k {
			case "action", "repository", "sender", "installation", "organization", "enterprise":
			default:
				other = append(other, k)
			}
		}
		p.set("fields", sorted(other))
	}
	return p, true
}

func pullRequest(p proj, d map[string]any, action string) {
	pr := get(d, "pull_request")
	p.pull(pr)
	if _, ok := p["number"]; !ok {
		p.set("number", d["number"])
	}
	p.set("state", str(pr, "state"))
	if b, _ := get(pr, "draft").(bool); b {
		p.set("draft", true)
	}
	if b, _ := get(pr, "merged").(bool); b {
		p.set("merged", true)
	}
	p.set("base", str(pr, "base", "ref"))
	p.set("head", str(pr, "head", "ref"))
	p.set("head_sha", str(pr, "head", "sha"))
	p.set("size", compact(map[string]any{
		"commits": get(pr, "commits"), "additions": get(pr, "additions"),
		"deletions": get(pr, "deletions"), "changed_files": get(pr, "changed_files"),
	}))
	switch action {
	case "opened", "reopened", "ready_for_review", "edited":
		p.set("body", body(str(pr, "body")))
	case "synchronize":
		p.set("before", str(d, "before"))
		p.set("after", str(d, "after"))
	case "labeled", "unlabeled":
		p.set("label", str(d, "label", "name"))
	case "assigned", "unassigned":
		p.set("assignee", str(d, "assignee", "login"))
	case "review_requested", "review_request_removed":
		p.set("reviewer", first(str(d, "requested_reviewer", "login"), str(d, "requested_team", "name")))
	}
	if action == "edited" {
		p.set("previous_title", str(d, "changes", "title", "from"))
	}
	p.set("labels", names(list(pr, "labels"), "name"))
}

func issue(p proj, is any) {
	p.set("number", get(is, "number"))
	p.set("title", str(is, "title"))
	p.set("author", str(is, "user", "login"))
	p.set("url", str(is, "html_url"))
	p.set("state", str(is, "state"))
	if get(is, "pull_request") != nil {
		p.set("is_pull_request", true)
	}
}

func issueExtras(p proj, d map[string]any, action string) {
	is := get(d, "issue")
	switch action {
	case "opened", "reopened", "edited":
		p.set("body", body(str(is, "body")))
	case "labeled", "unlabeled":
		p.set("label", str(d, "label", "name"))
	case "assigned", "unassigned":
		p.set("assignee", str(d, "assignee", "login"))
	}
	p.set("labels", names(list(is, "labels"), "name"))
}

func reviewComment(c any) map[string]any {
	return compact(map[string]any{
		"author": str(c, "user", "login"), "body": body(str(c, "body")), "path": str(c, "path"),
		"line": get(c, "line"), "side": str(c, "side"), "url": str(c, "html_url"), "id": get(c, "id"),
		"in_reply_to": get(c, "in_reply_to_id"), "commit": str(c, "commit_id"),
	})
}

func push(p proj, d map[string]any) {
	p.set("ref", str(d, "ref"))
	p.set("before", str(d, "before"))
	p.set("after", str(d, "after"))
	for _, k := range []string{"created", "deleted", "forced"} {
		if b, _ := d[k].(bool); b {
			p.set(k, true)
		}
	}
	p.set("compare", str(d, "compare"))
	p.set("pusher", first(str(d, "pusher", "name"), str(d, "pusher", "username")))
	commits := list(d, "commits")
	var out []any
	for i, c := range commits {
		if i == MaxCommits {
			break
		}
		msg, _, _ := strings.Cut(str(c, "message"), "\n")
		out = append(out, compact(map[string]any{
			"id": short(str(c, "id")), "message": cut(msg, 200),
			"author": first(str(c, "author", "username"), str(c, "author", "name")),
		}))
	}
	p.set("commits", out)
	if len(commits) > MaxCommits {
		p.set("commits_not_listed", len(commits)-MaxCommits)
	}
	if len(commits) == 0 {
		if hc := get(d, "head_commit"); hc != nil {
			msg, _, _ := strings.Cut(str(hc, "message"), "\n")
			p.set("head_commit", compact(map[string]any{"id": short(str(hc, "id")), "message": cut(msg, 200)}))
		}
	}
}

// proj is a projection being built: fields without a value are left out.
type proj map[string]any

func (p proj) set(k string, v any) {
	if empty(v) {
		return
	}
	p[k] = v
}

// pull sets the fields every pull request projection has.
func (p proj) pull(pr any) {
	p.set("number", get(pr, "number"))
	p.set("title", str(pr, "title"))
	p.set("author", str(pr, "user", "login"))
	p.set("url", str(pr, "html_url"))
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case []string:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

func compact(m map[string]any) map[string]any {
	for k, v := range m {
		if empty(v) {
			delete(m, k)
		}
	}
	return m
}

// get walks a path of object keys; nil where any step is missing.
func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, path ...string) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...string) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func names(l []any, key string) []any {
	var out []any
	for _, e := range l {
		if s := str(e, key); s != "" && len(out) < MaxListed {
			out = append(out, s)
		}
	}
	return out
}

func numbers(l []any) []any {
	var out []any
	for _, e := range l {
		if n := get(e, "number"); n != nil && len(out) < MaxListed {
			out = append(out, n)
		}
	}
	return out
}

func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func sorted(ss []string) []any {
	for i := 1; i < len(ss); i++ {
		for j := i; j > 0 && ss[j] < ss[j-1]; j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
	out := make([]any, 0, min(len(ss), 50))
	for _, s := range ss {
		if len(out) == cap(out) {
			break
		}
		out = append(out, s)
	}
	return out
}

// body is s cut to BodyBytes with a note of what was left out.
func body(s string) string { return cut(s, BodyBytes) }

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := n
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(" […%d bytes more]", len(s)-keep)
}
