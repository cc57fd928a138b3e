package ingest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
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
	if len(secret) == 0 {
		return false
	}
	return verifySignature(hmac.New(sha256.New, secret), nil, body, sig)
}

// verifySignature is VerifySignature with mac, an HMAC-SHA256 under the
// secret in any state (it is reset first), summed into sum's room. The
// signature is decoded into an array on the stack; one that is not 64
// hex digits can equal no MAC.
func verifySignature(mac hash.Hash, sum, body []byte, sig string) bool {
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok || len(hexSig) != 2*sha256.Size {
		return false
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], []byte(hexSig)); err != nil {
		return false
	}
	mac.Reset()
	mac.Write(body)
	return hmac.Equal(got[:], mac.Sum(sum[:0]))
}

// signatureMACs holds HMAC-SHA256s for verifySignature: a MAC reset
// restores its keyed state rather than hashing the key again, and a
// webhook allocates none. The zero value is ready for use.
type signatureMACs struct {
	pool sync.Pool // of *signatureMAC
}

// signatureMAC is a MAC, the secret it is keyed with and the room its sum
// is written into.
type signatureMAC struct {
	secret []byte
	mac    hash.Hash
	sum    [sha256.Size]byte
}

// verify is VerifySignature, with a MAC of the pool's where it is keyed
// with secret.
func (p *signatureMACs) verify(secret, body []byte, sig string) bool {
	if len(secret) == 0 {
		return false
	}
	m, _ := p.pool.Get().(*signatureMAC)
	if m == nil || !bytes.Equal(m.secret, secret) {
		m = &signatureMAC{secret: bytes.Clone(secret), mac: hmac.New(sha256.New, secret)}
	}
	ok := verifySignature(m.mac, m.sum[:], body, sig)
	p.pool.Put(m)
	return ok
}

// githubPayload holds the fields of a webhook body that name its event.
type githubPayload struct {
	Action       string
	Ref          string
	Repository   string // full_name
	Organization string // login
	PullRequest  int64  // number
	Issue        int64  // number
	IssueIsPull  bool   // the issue has a non-null pull_request
	CheckRun     int64  // id
	WorkflowRun  int64  // id
	Installation *int64 // id
}

// githubFields reads the fields that name a webhook's event out of its
// body, decoded: a field of the wrong type is an error, as it would be
// for a decoder into a struct.
// githubPaths are the paths of a webhook's body githubFields reads.
var githubPaths = func() *policies.DataPaths {
	p := &policies.DataPaths{}
	for _, path := range [][]string{{"action"}, {"ref"}, {"repository", "full_name"}, {"organization", "login"},
		{"pull_request", "number"}, {"issue", "number"}, {"issue", "pull_request"}, {"check_run", "id"},
		{"workflow_run", "id"}, {"installation", "id"}} {
		p.Add(path...)
	}
	return p
}()

func githubFields(m map[string]any) (githubPayload, error) {
	var p githubPayload
	var err error
	str := func(obj map[string]any, k string) string {
		v, ok := obj[k]
		if !ok || v == nil || err != nil {
			return ""
		}
		s, ok := v.(string)
		if !ok {
			err = fmt.Errorf("%s is %T, want a string", k, v)
		}
		return s
	}
	num := func(obj map[string]any, k string) int64 {
		v, ok := obj[k]
		if !ok || v == nil || err != nil {
			return 0
		}
		n, ok := v.(int64)
		if !ok {
			err = fmt.Errorf("%s is %v, want a whole number", k, v)
		}
		return n
	}
	obj := func(k string) map[string]any {
		v, ok := m[k]
		if !ok || v == nil || err != nil {
			return nil
		}
		o, ok := v.(map[string]any)
		if !ok {
			err = fmt.Errorf("%s is %T, want an object", k, v)
		}
		return o
	}
	p.Action, p.Ref = str(m, "action"), str(m, "ref")
	if o := obj("repository"); o != nil {
		p.Repository = str(o, "full_name")
	}
	if o := obj("organization"); o != nil {
		p.Organization = str(o, "login")
	}
	if o := obj("pull_request"); o != nil {
		p.PullRequest = num(o, "number")
	}
	if o := obj("issue"); o != nil {
		p.Issue = num(o, "number")
		p.IssueIsPull = o["pull_request"] != nil
	}
	if o := obj("check_run"); o != nil {
		p.CheckRun = num(o, "id")
	}
	if o := obj("workflow_run"); o != nil {
		p.WorkflowRun = num(o, "id")
	}
	if o := obj("installation"); o != nil {
		id := num(o, "id")
		p.Installation = &id
	}
	return p, err
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
// published. A delivery whose source or subject could not be published
// (a repository name that is no URI path, a ref with a control
// character) is ErrBadRequest.
//
// The body is decoded once, here, as rules read it (policies.ParseJSON):
// data is what admission's rules see of it.
//
// Of the body only paths are decoded (policies.ParseJSONPaths; nil: all of
// it), the receiver's own among them (githubPaths): what the rules read
// (admission.Admitter.DataPaths), not the rest of a payload of tens of
// kilobytes, which is checked and skipped.
func githubEvent(h http.Header, body []byte, now time.Time, paths *policies.DataPaths) (e event.Event, data any, isPing bool, err error) {
	name, delivery := h.Get(HeaderGitHubEvent), h.Get(HeaderGitHubDelivery)
	switch {
	case name == "":
		return e, nil, false, fmt.Errorf("%w: missing %s header", ErrBadRequest, HeaderGitHubEvent)
	case !validGitHubName(name):
		return e, nil, false, fmt.Errorf("%w: %s %q is not an event name", ErrBadRequest, HeaderGitHubEvent, name)
	case delivery == "":
		return e, nil, false, fmt.Errorf("%w: missing %s header", ErrBadRequest, HeaderGitHubDelivery)
	case len(delivery) > 128 || strings.ContainsFunc(delivery, func(r rune) bool { return r <= ' ' || r > '~' }):
		return e, nil, false, fmt.Errorf("%w: %s %q is not a delivery id", ErrBadRequest, HeaderGitHubDelivery, delivery)
	}
	if trimmed := bytes.TrimLeft(body[:min(len(body), 64)], " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return e, nil, false, fmt.Errorf("%w: body of %s delivery %s is not a JSON object", ErrBadRequest, name, delivery)
	}
	data, err = policies.ParseJSONPaths(body, paths)
	if err != nil {
		return e, nil, false, fmt.Errorf("%w: body of %s delivery %s is not a JSON object: %w", ErrBadRequest, name, delivery, err)
	}
	m, ok := data.(map[string]any)
	if !ok {
		return e, nil, false, fmt.Errorf("%w: body of %s delivery %s is not a JSON object", ErrBadRequest, name, delivery)
	}
	p, err := githubFields(m)
	if err != nil {
		return e, nil, false, fmt.Errorf("%w: body of %s delivery %s: %w", ErrBadRequest, name, delivery, err)
	}
	if name == "ping" {
		return e, nil, true, nil
	}
	if p.Action != "" && !validGitHubName(p.Action) {
		return e, nil, false, fmt.Errorf("%w: action %q of %s delivery %s is not an action name", ErrBadRequest, p.Action, name, delivery)
	}
	e = event.New()
	e.SetID(delivery)
	e.SetType(events.GitHubType(name, p.Action))
	e.SetTime(now.UTC())
	source := "https://github.com"
	switch {
	case p.Repository != "":
		source += "/" + p.Repository
	case p.Organization != "":
		source += "/" + p.Organization
	case p.Installation != nil:
		source += "/apps/installations/" + strconv.FormatInt(*p.Installation, 10)
	}
	e.SetSource(source)
	subject := githubSubject(name, p)
	if subject != "" {
		e.SetSubject(subject)
	}
	// The source and subject come from the body: a repository, login or
	// ref that makes no URI or header value is the sender's to correct
	// (400), not a publish that fails on every retry (503).
	if err := events.CheckMsg("ingest.check", e); err != nil {
		return e, nil, false, fmt.Errorf("%w: %s delivery %s, source %.200q, subject %.200q: %w", ErrBadRequest, name, delivery, source, subject, err)
	}
	if err := e.SetData(event.ApplicationJSON, body); err != nil {
		return e, nil, false, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return e, data, false, nil
}

func githubSubject(name string, p githubPayload) string {
	switch {
	case p.PullRequest > 0:
		return "pull/" + strconv.FormatInt(p.PullRequest, 10)
	case p.Issue > 0:
		if p.IssueIsPull {
			return "pull/" + strconv.FormatInt(p.Issue, 10)
		}
		return "issues/" + strconv.FormatInt(p.Issue, 10)
	case p.CheckRun > 0:
		return "check_run/" + strconv.FormatInt(p.CheckRun, 10)
	case p.WorkflowRun > 0:
		return "workflow_run/" + strconv.FormatInt(p.WorkflowRun, 10)
	case name == "push" && p.Ref != "":
		return p.Ref
	}
	return ""
}
