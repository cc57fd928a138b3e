package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
)

// GitHub's webhook headers.
const (
	HeaderGitHubEvent     = "X-GitHub-Event"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderGitHubSignature = "X-Hub-Signature-256"
)

// MaxGitHubBody is the largest webhook body GitHub sends (25 MB).
const MaxGitHubBody = 25 << 20

// Sign returns the X-Hub-Signature-256 value of body under secret:
// "sha256=" and the hex HMAC-SHA256 of the raw bytes.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature reports whether sig is body's X-Hub-Signature-256 under
// secret, comparing in constant time.
func VerifySignature(secret, body []byte, sig string) bool {
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok || len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// githubPayload holds the fields of a webhook body that name its event.
type githubPayload struct {
	Action     string `json:"action"`
	Number     int64  `json:"number"`
	Ref        string `json:"ref"`
	Repository *struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Organization *struct {
		Login string `json:"login"`
	} `json:"organization"`
	PullRequest *struct {
		Number int64 `json:"number"`
	} `json:"pull_request"`
	Issue *struct {
		Number      int64           `json:"number"`
		PullRequest json.RawMessage `json:"pull_request"`
	} `json:"issue"`
	CheckRun *struct {
		ID int64 `json:"id"`
	} `json:"check_run"`
	WorkflowRun *struct {
		ID int64 `json:"id"`
	} `json:"workflow_run"`
	Installation *struct {
		ID int64 `json:"id"`
	} `json:"installation"`
}

// validGitHubName accepts an X-GitHub-Event name: lower-case letters,
// digits and '_', as GitHub's event names are.
func validGitHubName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// githubEvent builds the CloudEvent of a verified webhook delivery
// (DESIGN §5): type com.github.<event>[.<action>], id the delivery GUID,
// source the repository (or organisation) URL, subject what the event is
// about (pull/12, issues/7, a ref, check_run/…), data the body as sent.
// It returns isPing for GitHub's ping, which is answered and not
// published.
func githubEvent(h http.Header, body []byte, now time.Time) (e event.Event, isPing bool, err error) {
	name, delivery := h.Get(HeaderGitHubEvent), h.Get(HeaderGitHubDelivery)
	switch {
	case name == "":
		return e, false, fmt.Errorf("%w: missing %s header", ErrBadRequest, HeaderGitHubEvent)
	case !validGitHubName(name):
		return e, false, fmt.Errorf("%w: %s %q is not an event name", ErrBadRequest, HeaderGitHubEvent, name)
	case delivery == "":
		return e, false, fmt.Errorf("%w: missing %s header", ErrBadRequest, HeaderGitHubDelivery)
	case len(delivery) > 128 || strings.ContainsFunc(delivery, func(r rune) bool { return r <= ' ' || r > '~' }):
		return e, false, fmt.Errorf("%w: %s %q is not a delivery id", ErrBadRequest, HeaderGitHubDelivery, delivery)
	}
	var p githubPayload
	if trimmed := strings.TrimLeft(string(body[:min(len(body), 64)]), " \t\r\n"); !strings.HasPrefix(trimmed, "{") {
		return e, false, fmt.Errorf("%w: body of %s delivery %s is not a JSON object", ErrBadRequest, name, delivery)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return e, false, fmt.Errorf("%w: body of %s delivery %s is not a JSON object: %w", ErrBadRequest, name, delivery, err)
	}
	if name == "ping" {
		return e, true, nil
	}
	if p.Action != "" && !validGitHubName(p.Action) {
		return e, false, fmt.Errorf("%w: action %q of %s delivery %s is not an action name", ErrBadRequest, p.Action, name, delivery)
	}
	e = event.New()
	e.SetID(delivery)
	e.SetType(events.GitHubType(name, p.Action))
	e.SetTime(now.UTC())
	switch {
	case p.Repository != nil && p.Repository.FullName != "":
		e.SetSource("https://github.com/" + p.Repository.FullName)
	case p.Organization != nil && p.Organization.Login != "":
		e.SetSource("https://github.com/" + p.Organization.Login)
	case p.Installation != nil:
		e.SetSource("https://github.com/apps/installations/" + strconv.FormatInt(p.Installation.ID, 10))
	default:
		e.SetSource("https://github.com")
	}
	if s := githubSubject(name, p); s != "" {
		e.SetSubject(s)
	}
	if err := e.SetData(event.ApplicationJSON, body); err != nil {
		return e, false, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return e, false, nil
}

func githubSubject(name string, p githubPayload) string {
	switch {
	case p.PullRequest != nil && p.PullRequest.Number > 0:
		return "pull/" + strconv.FormatInt(p.PullRequest.Number, 10)
	case p.Issue != nil && p.Issue.Number > 0:
		if len(p.Issue.PullRequest) > 0 && string(p.Issue.PullRequest) != "null" {
			return "pull/" + strconv.FormatInt(p.Issue.Number, 10)
		}
		return "issues/" + strconv.FormatInt(p.Issue.Number, 10)
	case p.CheckRun != nil && p.CheckRun.ID > 0:
		return "check_run/" + strconv.FormatInt(p.CheckRun.ID, 10)
	case p.WorkflowRun != nil && p.WorkflowRun.ID > 0:
		return "workflow_run/" + strconv.FormatInt(p.WorkflowRun.ID, 10)
	case name == "push" && p.Ref != "":
		return p.Ref
	}
	return ""
}
