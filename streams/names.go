package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jetloop/jetloop/events"
)

// DefaultPrefix is the subject prefix of a deployment that sets none.
const DefaultPrefix = "jl"

// ErrBadSubject reports a subject or key that is not of jetloop's layout.
var ErrBadSubject = errors.New("subject is not of the expected form")

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,15}$`)

// Names builds every stream name, subject and key of one deployment. The
// prefix (default "jl") lets several deployments share a NATS account.
type Names struct {
	prefix string
}

// NewNames returns the names under prefix: lower-case letters, digits and
// underscores, starting with a letter, at most 16 characters. An empty
// prefix selects DefaultPrefix.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(prefix) {
		return Names{}, fmt.Errorf("streams: prefix %q: want lower-case letters, digits and _ starting with a letter, at most 16", prefix)
	}
	return Names{prefix: prefix}, nil
}

// Default returns the names under DefaultPrefix.
func Default() Names { return Names{prefix: DefaultPrefix} }

// Prefix is the deployment's subject prefix.
func (n Names) Prefix() string { return n.p() }

func (n Names) p() string {
	if n.prefix == "" {
		return DefaultPrefix
	}
	return n.prefix
}

func (n Names) upper() string { return strings.ToUpper(n.p()) }

// Stream names.

// StreamIn is the stream of admitted events, ticks, schedule messages and
// pending debounced events (JL_IN).
func (n Names) StreamIn() string { return n.upper() + "_IN" }

// StreamCtl is the stream of control messages (JL_CTL).
func (n Names) StreamCtl() string { return n.upper() + "_CTL" }

// StreamDLQ is the dead letter stream (JL_DLQ).
func (n Names) StreamDLQ() string { return n.upper() + "_DLQ" }

// StreamAudit is the stream of decisions and status changes (JL_AUDIT).
func (n Names) StreamAudit() string { return n.upper() + "_AUDIT" }

// Bucket names.

// BucketSessions holds turn state and transcripts (jl_sessions).
func (n Names) BucketSessions() string { return n.p() + "_sessions" }

// BucketLeases holds session leases with per-key TTL (jl_leases).
func (n Names) BucketLeases() string { return n.p() + "_leases" }

// BucketDedupe is the long-horizon dedupe store (jl_dedupe).
func (n Names) BucketDedupe() string { return n.p() + "_dedupe" }

// BucketAgents holds versioned agent definitions (jl_agents).
func (n Names) BucketAgents() string { return n.p() + "_agents" }

// BucketRollouts holds the run counts of each agent's rollout, which
// its guard judges (jl_rollouts).
func (n Names) BucketRollouts() string { return n.p() + "_rollouts" }

// BucketSlots holds the concurrency slots of agents' runs, with per-key
// TTL (jl_slots).
func (n Names) BucketSlots() string { return n.p() + "_slots" }

// BucketSpend holds the day counters of agents' spend, with per-key TTL
// (jl_spend).
func (n Names) BucketSpend() string { return n.p() + "_spend" }

// BucketSchedules holds schedule health (jl_schedules).
func (n Names) BucketSchedules() string { return n.p() + "_schedules" }

// BucketLedger holds the usage counters of delegation trees, shared by
// every worker (jl_ledger).
func (n Names) BucketLedger() string { return n.p() + "_ledger" }

// BucketStatus is the status index (jl_status): one key per session,
// <status>.<agent>.<session>, so the sessions in one status are a key
// prefix.
func (n Names) BucketStatus() string { return n.p() + "_status" }

// StatusKey is the key of session r in status st in jl_status.
func (n Names) StatusKey(st string, r SessionRef) (string, error) {
	t, err := events.EncodeToken(st)
	if err != nil {
		return "", fmt.Errorf("streams: status: %w", err)
	}
	return t + "." + r.Key(), nil
}

// StatusKeys is the filter of jl_status keys in status st (any when empty)
// of agent (any when empty).
func (n Names) StatusKeys(st, agent string) (string, error) {
	s, a := "*", "*"
	if st != "" {
		t, err := events.EncodeToken(st)
		if err != nil {
			return "", fmt.Errorf("streams: status: %w", err)
		}
		s = t
	}
	if agent != "" {
		t, err := agentToken(agent)
		if err != nil {
			return "", err
		}
		a = t
	}
	return s + "." + a + ".*", nil
}

// ObjectBlobs is the object store for large tool results (jl_blobs).
func (n Names) ObjectBlobs() string { return n.p() + "_blobs" }

// KVStream is the name of the stream behind KV bucket b.
func KVStream(bucket string) string { return "KV_" + bucket }

// ObjectStream is the name of the stream behind object store b.
func ObjectStream(bucket string) string { return "OBJ_" + bucket }

// SessionRef names one session of one agent, with both names already
// encoded into subject tokens. Build it with NewSessionRef or parse it from
// a subject; its zero value names nothing.
type SessionRef struct {
	Agent, Session string
	agentTok       string
	sessionTok     string
}

// NewSessionRef validates and encodes an agent and a session name.
func NewSessionRef(agent, session string) (SessionRef, error) {
	at, err := events.EncodeToken(agent)
	if err != nil {
		return SessionRef{}, fmt.Errorf("streams: agent name: %w", err)
	}
	st, err := events.EncodeToken(session)
	if err != nil {
		return SessionRef{}, fmt.Errorf("streams: session name: %w", err)
	}
	return SessionRef{Agent: agent, Session: session, agentTok: at, sessionTok: st}, nil
}

// String is "agent/session", the form the CLI takes.
func (r SessionRef) String() string { return r.Agent + "/" + r.Session }

// Key is "<agent>.<session>" in tokens: the lease key and the stem of the
// session's keys.
func (r SessionRef) Key() string { return r.agentTok + "." + r.sessionTok }

func agentToken(agent string) (string, error) {
	t, err := events.EncodeToken(agent)
	if err != nil {
		return "", fmt.Errorf("streams: agent name: %w", err)
	}
	return t, nil
}

// Subjects of JL_IN.

// In is the subject of events admitted for a session: jl.in.<agent>.<session>.
func (n Names) In(r SessionRef) string { return n.p() + ".in." + r.Key() }

// InAll matches every subject of In.
func (n Names) InAll() string { return n.p() + ".in.>" }

// InAgent matches every session's In subject of one agent: the filter of
// the agent's durable consumer.
func (n Names) InAgent(agent string) (string, error) {
	t, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	return n.p() + ".in." + t + ".>", nil
}

// Sched is the subject of the schedule message of one agent schedule:
// jl.sched.<agent>.<schedule>.
func (n Names) Sched(agent, schedule string) (string, error) {
	at, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	st, err := events.EncodeToken(schedule)
	if err != nil {
		return "", fmt.Errorf("streams: schedule name: %w", err)
	}
	return n.p() + ".sched." + at + "." + st, nil
}

// SchedAll matches every schedule message subject.
func (n Names) SchedAll() string { return n.p() + ".sched.>" }

// Debounce is the subject holding a session's pending debounced event:
// jl.debounce.<agent>.<session>.
func (n Names) Debounce(r SessionRef) string { return n.p() + ".debounce." + r.Key() }

// DebounceKey is the subject holding a session's pending debounced event
// for one debounce key: jl.debounce.<agent>.<session>.<key-hash>.
func (n Names) DebounceKey(r SessionRef, key string) string {
	h := sha256.Sum256([]byte(key))
	return n.Debounce(r) + "." + hex.EncodeToString(h[:16])
}

// Throttle is the subject holding one throttled event until its turn:
// jl.throttle.<agent>.<session>.<event-hash>, one per event (id names
// the event).
func (n Names) Throttle(r SessionRef, id string) string {
	h := sha256.Sum256([]byte(id))
	return n.p() + ".throttle." + r.Key() + "." + hex.EncodeToString(h[:16])
}

// ThrottleAll matches every subject of Throttle.
func (n Names) ThrottleAll() string { return n.p() + ".throttle.>" }

// ThrottleKey is the key in jl_dedupe of the queue of an agent's trigger
// for one throttle key: throttle.<agent>.<trigger>.<key-hash>.
func (n Names) ThrottleKey(agent, trigger, key string) (string, error) {
	k, err := n.RateKey(agent, trigger, key)
	if err != nil {
		return "", err
	}
	return "throttle" + strings.TrimPrefix(k, "rate"), nil
}

// Timer is the subject of a delayed (@at) message for session r, named
// name (a tick's jitter, a wait's timeout): jl.timer.<agent>.<session>.<name>.
// The server fires it once on the session's input subject.
func (n Names) Timer(r SessionRef, name string) (string, error) {
	t, err := events.EncodeToken(name)
	if err != nil {
		return "", fmt.Errorf("streams: timer name: %w", err)
	}
	return n.p() + ".timer." + r.Key() + "." + t, nil
}

// TimerAll matches every timer subject.
func (n Names) TimerAll() string { return n.p() + ".timer.>" }

// DebounceAll matches every subject of Debounce and DebounceKey.
func (n Names) DebounceAll() string { return n.p() + ".debounce.>" }

// Subjects of JL_CTL.

// Ctl is a session's control subject: jl.ctl.<agent>.<session>.
func (n Names) Ctl(r SessionRef) string { return n.p() + ".ctl." + r.Key() }

// CtlAll matches every control subject.
func (n Names) CtlAll() string { return n.p() + ".ctl.>" }

// CtlAgent matches the control subjects of one agent's sessions.
func (n Names) CtlAgent(agent string) (string, error) {
	t, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	return n.p() + ".ctl." + t + ".>", nil
}

// Subjects of JL_DLQ and JL_AUDIT.

// DLQ is the dead letter subject for a reason such as "no_session" (the
// reasons are package dlq's): jl.dlq.<reason>.
func (n Names) DLQ(reason string) (string, error) {
	t, err := events.EncodeToken(reason)
	if err != nil {
		return "", fmt.Errorf("streams: dead letter reason: %w", err)
	}
	return n.p() + ".dlq." + t, nil
}

// DLQAll matches every dead letter subject.
func (n Names) DLQAll() string { return n.p() + ".dlq.>" }

// Audit is the subject of one record of kind (such as "admission" or
// "status") about an agent: jl.audit.<kind>.<agent>.
func (n Names) Audit(kind, agent string) (string, error) {
	kt, err := events.EncodeToken(kind)
	if err != nil {
		return "", fmt.Errorf("streams: audit kind: %w", err)
	}
	at, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	return n.p() + ".audit." + kt + "." + at, nil
}

// AuditAll matches every audit subject.
func (n Names) AuditAll() string { return n.p() + ".audit.>" }

// Core subjects.

// Status is a session's live status subject: jl.status.<agent>.<session>.
func (n Names) Status(r SessionRef) string { return n.p() + ".status." + r.Key() }

// StatusAll matches every status subject.
func (n Names) StatusAll() string { return n.p() + ".status.>" }

// APIPrefix is the subject prefix of the runtime API service: jl.api.
func (n Names) APIPrefix() string { return n.p() + ".api" }

// API is the subject of one API endpoint: jl.api.<endpoint>.
func (n Names) API(endpoint string) string { return n.APIPrefix() + "." + endpoint }

// Keys.

// StateKey is the key of a session's turn state in jl_sessions.
func (n Names) StateKey(r SessionRef) string { return r.Key() + ".state" }

// LogKey is the key of transcript entry seq of a session in jl_sessions.
func (n Names) LogKey(r SessionRef, seq uint64) string {
	return r.Key() + ".log." + strconv.FormatUint(seq, 10)
}

// LogKeys matches every transcript key of a session.
func (n Names) LogKeys(r SessionRef) string { return r.Key() + ".log.>" }

// NotesKey is the key of a session's notes in jl_sessions (the agent's
// own notes, written with notes_write).
func (n Names) NotesKey(r SessionRef) string { return r.Key() + ".notes" }

// ChildKey is the key in jl_sessions, among parent's own keys, that
// records a session its delegate calls started:
// <parent agent>.<parent session>.child.<child agent>.<child session>.
// Its parent's keys name its children, so they are read without reading
// any other session's.
func (n Names) ChildKey(parent, child SessionRef) string {
	return parent.Key() + ".child." + child.Key()
}

// ChildKeys matches every ChildKey of parent.
func (n Names) ChildKeys(parent SessionRef) string { return parent.Key() + ".child.>" }

// ParseChildKey returns the child a ChildKey of parent names.
func (n Names) ParseChildKey(parent SessionRef, key string) (SessionRef, error) {
	rest, ok := strings.CutPrefix(key, parent.Key()+".child.")
	if !ok {
		return SessionRef{}, fmt.Errorf("streams: %w: key %q is no child key of %s", ErrBadSubject, key, parent)
	}
	at, st, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(st, ".") {
		return SessionRef{}, fmt.Errorf("streams: %w: key %q is no child key of %s", ErrBadSubject, key, parent)
	}
	return parseRef(key, at, st)
}

// DelegationKey is the key in jl_sessions, among parent's own keys, of
// the delegate event its delegate call of step publishes:
// <agent>.<session>.delegation.<step>. The step names one intent in the
// session's life, so a call id used again in another step has a key of
// its own.
func (n Names) DelegationKey(parent SessionRef, step uint64) string {
	return parent.Key() + ".delegation." + strconv.FormatUint(step, 10)
}

// SessionKeys matches every key of a session in jl_sessions.
func (n Names) SessionKeys(r SessionRef) string { return r.Key() + ".>" }

// StateKeys matches the state key of every session in jl_sessions.
func (n Names) StateKeys() string { return "*.*.state" }

// LeaseKey is a session's key in jl_leases.
func (n Names) LeaseKey(r SessionRef) string { return r.Key() }

// RetentionLeaseKey is the key in jl_leases that one worker holds while
// it applies an agent's retention: retention.<agent>.pass, three tokens
// where a session's lease has two, so the two never collide.
func (n Names) RetentionLeaseKey(agent string) (string, error) {
	t, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	return "retention." + t + ".pass", nil
}

// KVSubject is the subject a write of key in KV bucket lands on:
// $KV.<bucket>.<key>. Atomic batches and conditional writes that the KV
// API does not offer (a CAS update that sets a per-key TTL) publish to it.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// AgentKey is an agent's key in jl_agents.
func (n Names) AgentKey(agent string) (string, error) { return agentToken(agent) }

// SlotKey is the key in jl_slots of an agent's concurrency slots for one
// concurrency key ("" for the agent's pool): <agent>.<key-hash>.
func (n Names) SlotKey(agent, key string) (string, error) {
	at, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(key))
	return at + "." + hex.EncodeToString(h[:16]), nil
}

// SpendKey is the key in jl_spend of an agent's spend on one UTC day
// (YYYYMMDD), of every session (key "") or of one limit key's:
// <agent>.<day> or <agent>.<day>.<key-hash>.
func (n Names) SpendKey(agent, day, key string) (string, error) {
	at, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	if key == "" {
		return at + "." + day, nil
	}
	h := sha256.Sum256([]byte(key))
	return at + "." + day + "." + hex.EncodeToString(h[:16]), nil
}

// RolloutKey is an agent's key in jl_rollouts.
func (n Names) RolloutKey(agent string) (string, error) { return agentToken(agent) }

// ScheduleKey is a schedule's key in jl_schedules: <agent>.<schedule>.
func (n Names) ScheduleKey(agent, schedule string) (string, error) {
	at, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	st, err := events.EncodeToken(schedule)
	if err != nil {
		return "", fmt.Errorf("streams: schedule name: %w", err)
	}
	return at + "." + st, nil
}

// ResultBlob is the name in jl_blobs of the full result of tool call
// callID in a session: <agent>.<session>.result.<call-id>.<digest>, the
// call id encoded as a token and digest a hash of the content (hex), so
// that a name cannot be guessed without the content. ParseSessionKey
// reads the session back from it: only that session reads it.
func (n Names) ResultBlob(r SessionRef, callID, digest string) (string, error) {
	ct, err := events.EncodeToken(callID)
	if err != nil {
		return "", fmt.Errorf("streams: call id: %w", err)
	}
	dt, err := events.EncodeToken(digest)
	if err != nil || digest == "" {
		return "", fmt.Errorf("streams: result digest %q: not a token", digest)
	}
	return r.Key() + ".result." + ct + "." + dt, nil
}

// InputBlob is the name in jl_blobs of an input a delegated session was
// given: <agent>.<session>.input.<name>, the input's name encoded as a
// token. ParseSessionKey reads the session back from it, so the session
// that received it may read it and its parent's other blobs stay its
// parent's.
func (n Names) InputBlob(r SessionRef, input string) (string, error) {
	it, err := events.EncodeToken(input)
	if err != nil {
		return "", fmt.Errorf("streams: input name: %w", err)
	}
	return r.Key() + ".input." + it, nil
}

// LedgerKey is a session's key in jl_ledger: <agent>.<session>.
func (n Names) LedgerKey(r SessionRef) string { return r.Key() }

// EventBlob is the name in jl_blobs of the data of an event too large
// for a message, as delivered to one session:
// <agent>.<session>.event.<event-hash>, where the hash names the event
// and its data (the ingest joins events.MsgID and a digest of the data, so
// the name cannot be guessed without the data). ParseSessionKey reads the
// session back from it: only that session reads it.
func (n Names) EventBlob(r SessionRef, eventHash string) (string, error) {
	ht, err := events.EncodeToken(eventHash)
	if err != nil {
		return "", fmt.Errorf("streams: event hash: %w", err)
	}
	return r.Key() + ".event." + ht, nil
}

// DedupeKey is the key in jl_dedupe of an event from source with id:
// <source>.<id-hash>. The source is hashed too when it would not fit a token.
func (n Names) DedupeKey(source, id string) string {
	h := sha256.Sum256([]byte(id))
	st, err := events.EncodeToken(source)
	if err != nil || len(st) > 64 {
		sh := sha256.Sum256([]byte(source))
		st = "h" + hex.EncodeToString(sh[:8])
	}
	return st + "." + hex.EncodeToString(h[:16])
}

// RateKey is the key in jl_dedupe of the token bucket of an agent's
// trigger for one rate-limit key: rate.<agent>.<trigger>.<key-hash>. It
// has four tokens where a dedupe key has two, so the two never collide in
// the bucket they share; both are short-lived state with a per-key TTL.
func (n Names) RateKey(agent, trigger, key string) (string, error) {
	at, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	tt, err := events.EncodeToken(trigger)
	if err != nil {
		return "", fmt.Errorf("streams: trigger name: %w", err)
	}
	h := sha256.Sum256([]byte(key))
	return "rate." + at + "." + tt + "." + hex.EncodeToString(h[:16]), nil
}

// Parsing.

// ParseSession returns the session a session subject names: one of In,
// Ctl, Status or Debounce. A subject whose agent or session name no event
// can carry (events.CheckString: a control character, a noncharacter) names
// no session and is refused.
func (n Names) ParseSession(subject string) (SessionRef, error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != n.p() {
		return SessionRef{}, fmt.Errorf("streams: %w: %q is not %s.<kind>.<agent>.<session>", ErrBadSubject, subject, n.p())
	}
	switch parts[1] {
	case "in", "ctl", "status", "debounce":
	default:
		return SessionRef{}, fmt.Errorf("streams: %w: %q has kind %q", ErrBadSubject, subject, parts[1])
	}
	ref, err := parseRef(subject, parts[2], parts[3])
	if err != nil {
		return SessionRef{}, err
	}
	if err := events.CheckString(ref.Agent); err != nil {
		return SessionRef{}, fmt.Errorf("streams: %w: %q: agent name: %w", ErrBadSubject, subject, err)
	}
	if err := events.CheckString(ref.Session); err != nil {
		return SessionRef{}, fmt.Errorf("streams: %w: %q: session name: %w", ErrBadSubject, subject, err)
	}
	return ref, nil
}

// DLQReason returns the reason a dead letter subject (DLQ) names.
func (n Names) DLQReason(subject string) (string, error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 3 || parts[0] != n.p() || parts[1] != "dlq" {
		return "", fmt.Errorf("streams: %w: %q is not %s.dlq.<reason>", ErrBadSubject, subject, n.p())
	}
	r, err := events.DecodeToken(parts[2])
	if err != nil {
		return "", fmt.Errorf("streams: %w: %q: reason: %w", ErrBadSubject, subject, err)
	}
	return r, nil
}

// Incarnation is the core subject on which one incarnation (one process
// run) of a worker answers that it is alive:
// jl.worker.<worker>.<incarnation>.
func (n Names) Incarnation(worker, incarnation string) (string, error) {
	wt, err := events.EncodeToken(worker)
	if err != nil {
		return "", fmt.Errorf("streams: worker id: %w", err)
	}
	it, err := events.EncodeToken(incarnation)
	if err != nil {
		return "", fmt.Errorf("streams: incarnation: %w", err)
	}
	return n.p() + ".worker." + wt + "." + it, nil
}

// StartKey is the key in jl_leases of a worker's start record, which names
// its current incarnation: _start.<worker>. No session lease has it
// (agent names start with a letter or digit).
func (n Names) StartKey(worker string) (string, error) {
	wt, err := events.EncodeToken(worker)
	if err != nil {
		return "", fmt.Errorf("streams: worker id: %w", err)
	}
	return "_start." + wt, nil
}

// ParseSessionKey returns the session a jl_sessions or jl_leases key names.
func (n Names) ParseSessionKey(key string) (SessionRef, error) {
	parts := strings.SplitN(key, ".", 3)
	if len(parts) < 2 {
		return SessionRef{}, fmt.Errorf("streams: %w: key %q is not <agent>.<session>[...]", ErrBadSubject, key)
	}
	return parseRef(key, parts[0], parts[1])
}

func parseRef(in, at, st string) (SessionRef, error) {
	agent, err := events.DecodeToken(at)
	if err != nil {
		return SessionRef{}, fmt.Errorf("streams: %w: %q: agent: %w", ErrBadSubject, in, err)
	}
	session, err := events.DecodeToken(st)
	if err != nil {
		return SessionRef{}, fmt.Errorf("streams: %w: %q: session: %w", ErrBadSubject, in, err)
	}
	return SessionRef{Agent: agent, Session: session, agentTok: at, sessionTok: st}, nil
}

// InAgentAll matches every subject of one agent in JL_IN: its sessions'
// events, bursts, throttled events and timers, and its schedule messages.
func (n Names) InAgentAll(agent string) (string, error) {
	t, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	return n.p() + ".*." + t + ".>", nil
}
