package events

import (
	"encoding/json"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
)

// ExtThread names the chat thread an event came from, so that the answer
// to it goes back there: "slack:<channel>:<thread ts>".
const ExtThread = "jlthread"

// Thread is where an event belongs and where the run it starts answers:
// the issue or pull request of a GitHub delivery (with the App
// installation that received it and the commit it is about), or the Slack
// thread of a chat message. Tools default their target to it; a zero
// field is unknown.
type Thread struct {
	// Repo is the repository (owner/name) of a GitHub event.
	Repo string `json:"repo,omitempty"`
	// Number is the issue or pull request number.
	Number int `json:"number,omitempty"`
	// Installation is the GitHub App installation id of the delivery.
	Installation int64 `json:"installation,omitempty"`
	// HeadSHA is the commit a pull request, check or push is about.
	HeadSHA string `json:"head_sha,omitempty"`
	// SlackChannel and SlackTS name a Slack thread: the channel and the ts
	// of the thread's first message.
	SlackChannel string `json:"slack_channel,omitempty"`
	SlackTS      string `json:"slack_ts,omitempty"`
}

// IsZero reports whether t names nothing.
func (t Thread) IsZero() bool { return t == Thread{} }

// SlackThread returns the ExtThread value of a Slack thread.
func SlackThread(channel, ts string) string { return "slack:" + channel + ":" + ts }

// ThreadOf reads where e belongs: for a GitHub delivery, the repository,
// the issue or pull request, the installation and the head commit of its
// payload; for an event with ExtThread, the chat thread. It returns nil
// when e names none of these.
func ThreadOf(e event.Event) *Thread {
	var t Thread
	if v, ok := e.Extensions()[ExtThread].(string); ok {
		if rest, ok := strings.CutPrefix(v, "slack:"); ok {
			if ch, ts, ok := strings.Cut(rest, ":"); ok && ch != "" && ts != "" {
				t.SlackChannel, t.SlackTS = ch, ts
			}
		}
	}
	if strings.HasPrefix(e.Type(), typeGitHubPrefix) {
		gitHubThread(e.Data(), &t)
	}
	if t.IsZero() {
		return nil
	}
	return &t
}

// gitHubPayload holds what of a webhook body says where it belongs.
type gitHubPayload struct {
	Number     int `json:"number"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Installation struct {
		ID int64 `json:"id"`
	} `json:"installation"`
	PullRequest *struct {
		Number int `json:"number"`
		Head   struct {
			SHA string `json:"sha"`
		} `json:"head"`
	} `json:"pull_request"`
	Issue *struct {
		Number int `json:"number"`
	} `json:"issue"`
	CheckRun *struct {
		HeadSHA      string `json:"head_sha"`
		PullRequests []struct {
			Number int `json:"number"`
		} `json:"pull_requests"`
	} `json:"check_run"`
	CheckSuite *struct {
		HeadSHA string `json:"head_sha"`
	} `json:"check_suite"`
	WorkflowRun *struct {
		HeadSHA string `json:"head_sha"`
	} `json:"workflow_run"`
	After string `json:"after"`
}

func gitHubThread(data []byte, t *Thread) {
	var p gitHubPayload
	if json.Unmarshal(data, &p) != nil {
		return
	}
	t.Repo = p.Repository.FullName
	t.Installation = p.Installation.ID
	t.Number = p.Number
	switch {
	case p.PullRequest != nil:
		if p.PullRequest.Number != 0 {
			t.Number = p.PullRequest.Number
		}
		t.HeadSHA = p.PullRequest.Head.SHA
	case p.Issue != nil:
		if p.Issue.Number != 0 {
			t.Number = p.Issue.Number
		}
	case p.CheckRun != nil:
		t.HeadSHA = p.CheckRun.HeadSHA
		if len(p.CheckRun.PullRequests) > 0 {
			t.Number = p.CheckRun.PullRequests[0].Number
		}
	case p.CheckSuite != nil:
		t.HeadSHA = p.CheckSuite.HeadSHA
	case p.WorkflowRun != nil:
		t.HeadSHA = p.WorkflowRun.HeadSHA
	}
	if t.HeadSHA == "" && len(p.After) == 40 && strings.Trim(p.After, "0") != "" {
		t.HeadSHA = p.After
	}
}
