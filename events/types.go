package events

// Event types (the CloudEvents "type" attribute) that jetloop produces.
const (
	// TypeTick is a schedule firing. Its id is derived from the schedule
	// and the fire time, and its subject is the schedule's name.
	TypeTick = "dev.jetloop.tick"

	// TypeRequest is a user's request to an agent. Its id is the
	// request's Idempotency-Key, else a new id; its subject is the session.
	TypeRequest = "dev.jetloop.request"

	// TypeDelegate starts a child session: a session's delegate call,
	// published through admission to the child's subject with ExtParent and
	// ExtHops. Its id derives from the parent's call id, so a repeated
	// publish is one event; its data is the task, the inputs, the carved
	// budget and the chain of delegations above it (see package worker).
	TypeDelegate = "dev.jetloop.delegate"

	// TypeDelegateResult is a child session's answer to the call that
	// started it, published by the child's worker to the parent's subject
	// when the child's run ends; the parent settles the call with it.
	TypeDelegateResult = "dev.jetloop.delegate.result"

	// typeControlPrefix prefixes the type of every control message.
	typeControlPrefix = "dev.jetloop.control."

	// typeGitHubPrefix prefixes the type of every GitHub webhook delivery.
	typeGitHubPrefix = "com.github."
)

// Extension attributes that jetloop sets on events. Names follow the
// CloudEvents rule for extensions: lower-case letters and digits only.
const (
	// ExtAgent names the agent the event is for.
	ExtAgent = "jlagent"
	// ExtSession names the session the event is for.
	ExtSession = "jlsession"
	// ExtHops counts delegation hops, so the runtime can cap the depth of
	// agents starting agents.
	ExtHops = "jlhops"
	// ExtParent names the parent session of a sub-session, as
	// "agent/session".
	ExtParent = "jlparent"
)

// ControlType returns the type of a control message for verb, such as
// "dev.jetloop.control.cancel" for "cancel". Package control owns the
// verbs; this only spells the type.
func ControlType(verb string) string {
	return typeControlPrefix + verb
}

// GitHubType returns the type of a GitHub webhook delivery: the
// X-GitHub-Event name, then the payload's action if it has one, as in
// "com.github.pull_request.opened" or "com.github.push".
func GitHubType(event, action string) string {
	if action == "" {
		return typeGitHubPrefix + event
	}
	return typeGitHubPrefix + event + "." + action
}
