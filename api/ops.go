package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// Bounds of requests.
const (
	// MaxApplyFiles bounds the files of one apply.
	MaxApplyFiles = 100
	// MaxEvents bounds the decisions one events request reads.
	MaxEvents = 10_000
	// DefaultEvents is the number of decisions an events request without
	// a limit reads.
	DefaultEvents = 50
)

// Sources of the events the API publishes.
const (
	sourceAPI  = "/jetloop/api"
	sourceHTTP = "/jetloop/http"
)

// ops maps every endpoint to its operation.
func (s *Service) ops() map[string]op {
	ops := map[string]op{
		EndpointAgents:    handle(s.listAgents),
		EndpointApply:     handle(s.apply),
		EndpointSend:      handle(s.send),
		EndpointStatus:    handle(s.status),
		EndpointShow:      handle(s.show),
		EndpointSchedules: handle(s.listSchedules),
		EndpointEvents:    handle(s.events),
		EndpointContext:   handle(s.sessionContext),
		EndpointDLQ:       handle(s.deadLetters),
	}
	for _, v := range control.Verbs() {
		ops[string(v)] = handle(func(ctx context.Context, req ControlRequest) (ControlResponse, error) {
			return s.control(ctx, v, req, sourceAPI)
		})
	}
	s.versionOps(ops)
	return ops
}

// handle adapts a typed operation to an op.
func handle[Req, Resp any](fn func(context.Context, Req) (Resp, error)) op {
	return func(ctx context.Context, body []byte) (any, error) {
		req, err := decode[Req](body)
		if err != nil {
			return nil, err
		}
		return fn(ctx, req)
	}
}

// KeyWarnings warns, for a definition whose model needs an API key, when
// the variable holding it is not set in getenv's environment: a worker
// that lacks it fails the agent's runs, so whoever applies it should
// know.
//
// Likewise for the GitHub tools: a definition that names one while
// neither its github: settings nor getenv's JETLOOP_GITHUB_* give
// credentials (or give ones that cannot be read) is warned that the tools
// will answer with an error, naming the settings that would do.
func KeyWarnings(d policies.Definition, getenv func(string) string) []string {
	var out []string
	if env, needed := model.KeyEnv(d.Model); needed && strings.TrimSpace(getenv(env)) == "" {
		out = append(out, fmt.Sprintf("agent %s: model provider %s reads its API key from %s, which is not set here; a worker without it fails the agent's runs",
			d.Name, d.Model.Provider, env))
	}
	var uses []string
	for _, t := range d.Tools {
		if strings.HasPrefix(t, "github_") {
			uses = append(uses, t)
		}
	}
	if len(uses) > 0 {
		var s ghapp.Settings
		if d.GitHub != nil {
			s = *d.GitHub
		}
		if _, err := ghapp.Resolve(s, getenv, os.ReadFile); err != nil {
			out = append(out, fmt.Sprintf("agent %s: %s will answer with an error until the worker has GitHub credentials: %v",
				d.Name, strings.Join(uses, ", "), err))
		}
	}
	return out
}

// sessionRef validates the agent and session of a request.
func sessionRef(agent, session string) (streams.SessionRef, error) {
	if agent == "" || session == "" {
		return streams.SessionRef{}, errorf(http.StatusBadRequest, "agent and session are required")
	}
	ref, err := streams.NewSessionRef(agent, session)
	if err != nil {
		return streams.SessionRef{}, errorf(http.StatusBadRequest, "%v", err)
	}
	return ref, nil
}

// Requests runs a user request through the ingest's pipeline (dedupe,
// admission, limits, publish, records) and says where it went;
// ingest.Server.Request is one.
type Requests func(ctx context.Context, r events.Request, receiver string) (*ingest.Result, error)

// send is the API's way in for a user request: the same event, and the
// same pipeline, as POST …/messages, so it is decided, limited and
// recorded alike.
func (s *Service) send(ctx context.Context, req SendRequest) (SendResponse, error) {
	ref, err := sessionRef(req.Agent, req.Session)
	if err != nil {
		return SendResponse{}, err
	}
	if strings.TrimSpace(req.Text) == "" {
		return SendResponse{}, errorf(http.StatusBadRequest, "send to %s: text is empty", ref)
	}
	if s.cfg.Requests == nil {
		return SendResponse{}, errorf(http.StatusServiceUnavailable, "send to %s: this process runs no ingest to admit requests", ref)
	}
	res, err := s.cfg.Requests(ctx, events.Request{Agent: ref.Agent, Session: ref.Session, Text: req.Text, ID: req.ID}, "api")
	if err != nil {
		return SendResponse{}, &Error{Code: ingest.Status(err), Message: fmt.Sprintf("send to %s: %v", ref, err)}
	}
	out := SendResponse{Agent: ref.Agent, Session: ref.Session, ID: res.ID, Duplicate: res.Duplicate}
	for _, t := range res.Admitted {
		if t.Agent == ref.Agent {
			out.Session, out.Seq, out.Debounced, out.Throttled, out.At = t.Session, t.Seq, t.Debounced, t.Throttled, t.At
			break
		}
	}
	return out, nil
}

// checkAgentFilter refuses an agent filter that names no agent could
// have.
func checkAgentFilter(agent string) error {
	if agent == "" {
		return nil
	}
	if err := policies.CheckName(agent); err != nil {
		return errorf(http.StatusBadRequest, "agent %q: no agent has this name: %v", agent, err)
	}
	return nil
}

func (s *Service) status(ctx context.Context, req StatusRequest) (StatusResponse, error) {
	if err := checkAgentFilter(req.Agent); err != nil {
		return StatusResponse{}, err
	}
	if req.Status != "" && !record.Status(req.Status).Known() {
		names := make([]string, 0, len(record.Statuses()))
		for _, st := range record.Statuses() {
			names = append(names, string(st))
		}
		return StatusResponse{}, errorf(http.StatusBadRequest, "status %q: want one of %s", req.Status, strings.Join(names, ", "))
	}
	if req.Limit < 0 || req.Limit > record.MaxPage {
		return StatusResponse{}, errorf(http.StatusBadRequest, "status: limit %d: want 1 to %d", req.Limit, record.MaxPage)
	}
	page, err := record.Select(ctx, s.js, s.names, record.Query{Status: record.Status(req.Status), Agent: req.Agent, Since: req.Since, Limit: req.Limit, Cursor: req.Cursor})
	if err != nil {
		return StatusResponse{}, err
	}
	rows := page.Sessions
	if err := s.describeWaiting(ctx, rows); err != nil {
		return StatusResponse{}, err
	}
	numbers := newVersionNumbers(s.agents)
	for i := range rows {
		rows[i].DefinitionVersion = numbers.of(ctx, rows[i].Agent, rows[i].DefinitionVersion, rows[i].DefinitionRevision)
	}
	out := StatusResponse{Sessions: rows, Next: page.Next}
	if n := fit(rows, s.cfg.MaxResponse-1024); n < len(rows) {
		// The next page starts at the first session left out.
		out.Sessions, out.Truncated, out.Next = rows[:n], true, 0
		cut, err := record.Select(ctx, s.js, s.names, record.Query{Status: record.Status(req.Status), Agent: req.Agent, Since: req.Since, Limit: n, Cursor: req.Cursor})
		if err != nil {
			return StatusResponse{}, err
		}
		out.Next = cut.Next
	}
	return out, nil
}

func (s *Service) show(ctx context.Context, req ShowRequest) (ShowResponse, error) {
	ref, err := sessionRef(req.Agent, req.Session)
	if err != nil {
		return ShowResponse{}, err
	}
	limit := req.Limit
	switch {
	case limit < 0 || limit > MaxShowLimit:
		return ShowResponse{}, errorf(http.StatusBadRequest, "show: limit %d: want 1 to %d", limit, MaxShowLimit)
	case limit == 0:
		limit = DefaultShowLimit
	}
	from := max(req.From, 1)
	tr, err := record.Page(ctx, s.js, s.names, ref, from, limit)
	if err != nil {
		return ShowResponse{}, err
	}
	if def, err := s.sessionDefinition(ctx, record.State{Origin: record.Origin{Agent: tr.Agent},
		Program: record.Program{DefinitionRevision: tr.DefinitionRevision}}); err == nil {
		markMasked(&tr, def)
	}
	tr.DefinitionVersion = newVersionNumbers(s.agents).of(ctx, tr.Agent, tr.DefinitionVersion, tr.DefinitionRevision)
	if from == 1 {
		// The first page says what the session delegated and to whom.
		if err := s.delegationOf(ctx, ref, &tr); err != nil {
			return ShowResponse{}, err
		}
	}
	entries := tr.Transcript
	out := ShowResponse{Transcript: tr}
	out.Transcript.Transcript = []record.Entry{}
	head, err := json.Marshal(out)
	if err != nil {
		return ShowResponse{}, fmt.Errorf("api: show %s: %w", ref, err)
	}
	n := fit(entries, s.cfg.MaxResponse-len(head)-64)
	if n == 0 && len(entries) > 0 {
		return ShowResponse{}, errorf(http.StatusInternalServerError, "show %s: entry %d does not fit a response of %d bytes", ref, entries[0].ID, s.cfg.MaxResponse)
	}
	out.Transcript.Transcript = entries[:n]
	switch {
	case n < len(entries):
		out.Truncated, out.Next = true, entries[n].ID
	case len(entries) > 0 && entries[n-1].ID < tr.Entries:
		out.Truncated, out.Next = true, entries[n-1].ID+1
	}
	return out, nil
}

// control publishes a control message for the verb.
func (s *Service) control(ctx context.Context, verb control.Verb, req ControlRequest, source string) (ControlResponse, error) {
	ref, err := sessionRef(req.Agent, req.Session)
	if err != nil {
		return ControlResponse{}, err
	}
	m := control.Message{Verb: verb, Text: req.Text, CallID: req.CallID, As: req.As, ID: req.ID, Source: req.Source}
	if m.Source == "" {
		m.Source = source
	}
	switch {
	case verb == control.Fork && req.Turn == nil:
		return ControlResponse{}, errorf(http.StatusBadRequest, "fork %s: turn is required, the last turn to copy", ref)
	case verb != control.Fork && req.Turn != nil:
		return ControlResponse{}, errorf(http.StatusBadRequest, "%s %s: turn is only for fork", verb, ref)
	case req.Turn != nil:
		m.Turn = *req.Turn
	}
	if err := m.Validate(); err != nil {
		return ControlResponse{}, fmt.Errorf("%s %s: %w", verb, ref, err)
	}
	answer := func(seq uint64, dup bool) ControlResponse {
		return ControlResponse{Agent: ref.Agent, Session: ref.Session, Verb: verb, Seq: seq, ID: m.ID, Duplicate: dup}
	}
	// A sender's id is remembered with what it asked for as long as
	// events are: a retry gets the first answer, however late; another
	// request under the same id is refused.
	claimID, digest := ref.Key()+"\x00"+m.Source+"\x00"+m.ID, controlDigest(m)
	if m.ID != "" {
		if seq, done, err := s.usedID(ctx, ref, m, claimID, digest); err != nil || done {
			return answer(seq, done), err
		}
	}
	if err := s.CheckControl(ctx, ref, m); err != nil {
		if m.ID != "" {
			if seq, ok := s.retried(ctx, ref, m); ok {
				return answer(seq, true), nil
			}
		}
		return ControlResponse{}, err
	}
	var claim uint64
	if m.ID == "" {
		m.ID = uuid.NewString()
	} else {
		ent, rev, fresh, err := s.seen.Claim(ctx, controlRequests, claimID, nil, dedupe.WithDigest(digest))
		if err != nil {
			return ControlResponse{}, err
		}
		if !fresh {
			// Another request with this id came in meanwhile.
			if ent.Digest != digest {
				return ControlResponse{}, reusedID(verb, ref, m.ID)
			}
			if seq := claimedSeq(ent); seq > 0 {
				return answer(seq, true), nil
			}
		}
		claim = rev
	}
	seq, err := control.Publish(ctx, s.js, s.names, ref, m)
	if err != nil {
		return ControlResponse{}, err
	}
	if claim > 0 {
		out, _ := json.Marshal(claimOutcome{Seq: seq})
		if err := s.seen.Amend(ctx, controlRequests, claimID, claim, dedupe.Entry{At: time.Now().UTC(), Outcome: out, Digest: digest}); err != nil {
			// Published: a retry inside JL_CTL's window gets the same
			// sequence; after it, the worker applies the id once.
			s.log.Warn("control request not remembered with its sequence", "agent", ref.Agent, "session", ref.Session, "id", m.ID, "err", err)
		}
	}
	s.log.Info("control message published", "agent", ref.Agent, "session", ref.Session, "verb", verb, "seq", seq, "id", m.ID, "source", m.Source)
	return answer(seq, false), nil
}

// controlRequests is the jl_dedupe source of control requests by id.
const controlRequests = "control-request"

// claimOutcome is what jl_dedupe keeps of a control request.
type claimOutcome struct {
	Seq uint64 `json:"seq"`
}

func claimedSeq(ent dedupe.Entry) uint64 {
	var out claimOutcome
	_ = json.Unmarshal(ent.Outcome, &out)
	return out.Seq
}

// controlDigest names what a control message asks, so that an id used
// again for something else is told apart from a retry.
func controlDigest(m control.Message) string {
	return dedupe.Digest([]byte(m.Verb), []byte(m.Text), []byte(m.CallID), []byte(strconv.Itoa(m.Turn)), []byte(m.As))
}

func reusedID(verb control.Verb, ref streams.SessionRef, id string) error {
	return errorf(http.StatusConflict, "%s %s: id %q (Idempotency-Key) was used for a different control request; use a new one", verb, ref, id)
}

// usedID looks the request's id up: an id used for another request is
// refused with 409; one used for this request and published answers with
// the first sequence (done).
func (s *Service) usedID(ctx context.Context, ref streams.SessionRef, m control.Message, claimID, digest string) (uint64, bool, error) {
	ent, ok, err := s.seen.Seen(ctx, controlRequests, claimID)
	switch {
	case err != nil:
		return 0, false, err
	case !ok:
		return 0, false, nil
	case ent.Digest != digest:
		return 0, false, reusedID(m.Verb, ref, m.ID)
	}
	seq := claimedSeq(ent)
	return seq, seq > 0, nil
}

func (s *Service) listSchedules(ctx context.Context, req SchedulesRequest) (SchedulesResponse, error) {
	switch req.Action {
	case "":
		hs, err := s.schedules.List(ctx)
		if err != nil {
			return SchedulesResponse{}, err
		}
		slices.SortFunc(hs, func(a, b schedule.Health) int {
			return strings.Compare(a.Agent+"/"+a.Schedule, b.Agent+"/"+b.Schedule)
		})
		if hs == nil {
			hs = []schedule.Health{}
		}
		return SchedulesResponse{Schedules: hs, NextFires: nextFires(hs, time.Now())}, nil
	case ScheduleResume, ScheduleSuspend:
		if req.Agent == "" || req.Schedule == "" {
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules %s: agent and schedule are required", req.Action)
		}
		var h schedule.Health
		var err error
		if req.Action == ScheduleResume {
			h, err = s.schedules.Resume(ctx, req.Agent, req.Schedule)
		} else {
			h, err = s.schedules.Suspend(ctx, req.Agent, req.Schedule)
		}
		if errors.Is(err, schedule.ErrNotFound) {
			return SchedulesResponse{}, errorf(http.StatusNotFound, "no schedule %s/%s", req.Agent, req.Schedule)
		}
		if err != nil {
			return SchedulesResponse{}, err
		}
		s.log.Info("schedule "+req.Action+"d", "agent", req.Agent, "schedule", req.Schedule, "state", h.State)
		return SchedulesResponse{Schedules: []schedule.Health{h}, NextFires: nextFires([]schedule.Health{h}, time.Now())}, nil
	case ScheduleTrigger, ScheduleBackfill:
		return s.fireSchedule(ctx, req)
	}
	return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules: unknown action %q (want %s, %s, %s or %s)", req.Action, ScheduleResume, ScheduleSuspend, ScheduleTrigger, ScheduleBackfill)
}

// nextFires are the next fires of the schedules of hs that fire, by
// agent/schedule.
func nextFires(hs []schedule.Health, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, h := range hs {
		if t := h.NextFire(now); !t.IsZero() {
			out[h.Agent+"/"+h.Schedule] = t
		}
	}
	return out
}

// fireSchedule publishes the ticks of a trigger or a backfill.
func (s *Service) fireSchedule(ctx context.Context, req SchedulesRequest) (SchedulesResponse, error) {
	if req.Agent == "" || req.Schedule == "" {
		return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules %s: agent and schedule are required", req.Action)
	}
	name := req.Agent + "/" + req.Schedule
	def, err := s.agents.Get(ctx, req.Agent)
	if errors.Is(err, policies.ErrNotFound) {
		return SchedulesResponse{}, errorf(http.StatusNotFound, "schedules %s %s: no agent %q", req.Action, name, req.Agent)
	}
	if err != nil {
		return SchedulesResponse{}, err
	}
	var spec schedule.Spec
	found := false
	for _, sc := range def.Schedules {
		if sc.Name == req.Schedule {
			if spec, err = schedule.Resolve(req.Agent, sc); err != nil {
				return SchedulesResponse{}, errorf(http.StatusConflict, "schedules %s %s: %v", req.Action, name, err)
			}
			found = true
		}
	}
	if !found {
		return SchedulesResponse{}, errorf(http.StatusNotFound, "schedules %s %s: agent %s has no schedule %q (version %d)", req.Action, name, req.Agent, req.Schedule, def.Version)
	}
	h, err := s.schedules.Get(ctx, req.Agent, req.Schedule)
	switch {
	case err == nil && h.State == schedule.StateSuspended:
		return SchedulesResponse{}, errorf(http.StatusConflict, "schedules %s %s: the schedule is suspended (its breaker tripped): jetloop schedules resume %s first", req.Action, name, name)
	case err != nil && !errors.Is(err, schedule.ErrNotFound):
		return SchedulesResponse{}, err
	}
	now := time.Now()
	var msgs []*nats.Msg
	var ticks []schedule.Tick
	if req.Action == ScheduleTrigger {
		if !req.From.IsZero() || !req.To.IsZero() {
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules trigger %s: from and to are for backfill", name)
		}
		if req.ID == "" {
			req.ID = uuid.NewString()
		}
		m, t, err := schedule.TriggerTick(s.names, spec, req.ID, now)
		if err != nil {
			return SchedulesResponse{}, err
		}
		msgs, ticks = []*nats.Msg{m}, []schedule.Tick{t}
	} else {
		switch {
		case req.From.IsZero() || req.To.IsZero():
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules backfill %s: from and to are required", name)
		case !req.From.Before(req.To):
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules backfill %s: from %s is not before to %s", name, req.From.Format(time.RFC3339), req.To.Format(time.RFC3339))
		case req.To.After(now.Add(time.Second)):
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules backfill %s: to %s is in the future; the server fires those slots", name, req.To.Format(time.RFC3339))
		case req.ID != "":
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "schedules backfill %s: a backfill's ticks are named by their slots; id is for trigger", name)
		}
		if msgs, ticks, err = schedule.BackfillTicks(s.names, spec, req.From, req.To); err != nil {
			return SchedulesResponse{}, errorf(http.StatusBadRequest, "%v", err)
		}
	}
	seen := func(ctx context.Context, id string) (bool, error) {
		_, ok, err := s.seen.Seen(ctx, schedule.DedupeSource, id)
		return ok, err
	}
	if err := s.tickRoom(ctx, req, msgs); err != nil {
		return SchedulesResponse{}, err
	}
	fired, err := schedule.Publish(ctx, s.js, s.names, msgs, ticks, seen)
	if err != nil {
		return SchedulesResponse{}, err
	}
	s.log.Info("schedule fired by hand", "agent", req.Agent, "schedule", req.Schedule, "action", req.Action, "ticks", len(fired))
	hs := []schedule.Health{}
	if h.Agent != "" {
		hs = append(hs, h)
	}
	return SchedulesResponse{Schedules: hs, Ticks: fired}, nil
}

func (s *Service) events(ctx context.Context, req EventsRequest) (EventsResponse, error) {
	if err := checkAgentFilter(req.Agent); err != nil {
		return EventsResponse{}, err
	}
	if req.Limit == 0 {
		req.Limit = DefaultEvents
	}
	if req.Limit < 1 || req.Limit > MaxEvents {
		return EventsResponse{}, errorf(http.StatusBadRequest, "events: limit %d: want 1 to %d", req.Limit, MaxEvents)
	}
	if req.Since.IsZero() {
		req.Since = time.Now().Add(-time.Hour)
	}
	read, err := admission.ReadRecent(ctx, s.js, s.names, req.Agent, req.Since, req.Limit)
	if err != nil {
		return EventsResponse{}, err
	}
	if read.Skip != nil {
		s.log.Warn("JL_AUDIT messages with lines of no decision record, skipped", "filter_agent", req.Agent, "messages", read.Skipped, "err", read.Skip)
	}
	recs := read.Records
	if recs == nil {
		recs = []admission.Record{}
	}
	// A change whose writer stopped before recording it is recorded now.
	if err := s.agents.CatchUpAudit(ctx, req.Agent); err != nil {
		s.log.Warn("definition changes not caught up in the audit stream", "filter_agent", req.Agent, "err", err)
	}
	changes, err := policies.Events(ctx, s.js, s.names, req.Agent, req.Since, req.Limit)
	if err != nil {
		return EventsResponse{}, err
	}
	if changes == nil {
		changes = []policies.Event{}
	}
	out := EventsResponse{Records: recs, Changes: changes, Skipped: read.Skipped}
	if read.Skip != nil {
		out.SkippedError = read.Skip.Error()
	}
	// Keep the newest when they do not all fit; definition changes, which
	// are few, get up to a quarter of the room.
	budget := s.cfg.MaxResponse - 1024
	newestChanges := slices.Clone(changes)
	slices.Reverse(newestChanges)
	if n := fit(newestChanges, budget/4); n < len(changes) {
		out.Changes, out.Truncated = changes[len(changes)-n:], true
	}
	used := 0
	for _, c := range out.Changes {
		b, _ := json.Marshal(c)
		used += len(b) + 1
	}
	newest := slices.Clone(recs)
	slices.Reverse(newest)
	if n := fit(newest, budget-used); n < len(recs) {
		out.Records, out.Truncated = recs[len(recs)-n:], true
	}
	return out, nil
}

func (s *Service) deadLetters(ctx context.Context, req DLQRequest) (DLQResponse, error) {
	f := dlq.Filter{Reason: dlq.Reason(req.Reason), Since: req.Since, Agent: req.Agent, From: req.From, Limit: req.Limit}
	if req.Reason != "" {
		if _, err := dlq.ParseReason(req.Reason); err != nil {
			return DLQResponse{}, errorf(http.StatusBadRequest, "dlq: %v", err)
		}
	}
	if len(req.Seqs) > 0 && (req.Reason != "" || !req.Since.IsZero() || req.Agent != "" || req.From != 0 || req.Limit != 0) {
		// A filter taken and then ignored would redrive letters it does
		// not select.
		return DLQResponse{}, errorf(http.StatusBadRequest, "dlq %s: name letters by sequence (%v) or select them by reason, since, agent, from and limit, not both", req.Action, req.Seqs)
	}
	switch req.Action {
	case "":
		if req.Limit < 0 || req.Limit > dlq.MaxLimit {
			return DLQResponse{}, errorf(http.StatusBadRequest, "dlq: limit %d: want 1 to %d", req.Limit, dlq.MaxLimit)
		}
		ls, next, err := dlq.List(ctx, s.js, s.names, f)
		if err != nil {
			return DLQResponse{}, err
		}
		if ls == nil {
			ls = []dlq.Letter{}
		}
		out := DLQResponse{Letters: ls, Next: next}
		if n := fit(ls, s.cfg.MaxResponse-1024); n < len(ls) {
			out.Letters, out.Next = ls[:n], ls[n].Seq
		}
		return out, nil
	case DLQShow:
		if len(req.Seqs) != 1 {
			return DLQResponse{}, errorf(http.StatusBadRequest, "dlq show: name one letter by its sequence (seqs: [N])")
		}
		l, err := dlq.Get(ctx, s.js, s.names, req.Seqs[0])
		if err != nil {
			return DLQResponse{}, err
		}
		return DLQResponse{Letters: []dlq.Letter{l}}, nil
	case DLQRedrive:
		seqs := req.Seqs
		if len(seqs) == 0 {
			if req.Reason == "" && req.Since.IsZero() && req.Agent == "" {
				return DLQResponse{}, errorf(http.StatusBadRequest, "dlq redrive: name letters by sequence, or select them by reason, since or agent")
			}
			if f.Limit == 0 {
				f.Limit = MaxRedrive
			}
			if f.Limit < 0 || f.Limit > MaxRedrive {
				return DLQResponse{}, errorf(http.StatusBadRequest, "dlq redrive: limit %d: want 1 to %d", req.Limit, MaxRedrive)
			}
			ls, _, err := dlq.List(ctx, s.js, s.names, f)
			if err != nil {
				return DLQResponse{}, err
			}
			for _, l := range ls {
				seqs = append(seqs, l.Seq)
			}
		}
		if len(seqs) > MaxRedrive {
			return DLQResponse{}, errorf(http.StatusBadRequest, "dlq redrive: %d letters, at most %d at once", len(seqs), MaxRedrive)
		}
		out := DLQResponse{Letters: []dlq.Letter{}, Redriven: []dlq.Redriven{}}
		for _, seq := range seqs {
			r, err := s.redriver.Redrive(ctx, seq)
			if errors.Is(err, dlq.ErrCannotRedrive) && len(req.Seqs) == 0 {
				// Selected by a filter, not named: the letter is left
				// where it is, said so, and the rest go on.
				out.NotRedriven = append(out.NotRedriven, NotRedriven{Letter: seq, Why: err.Error()})
				s.log.Warn("dead letter not redriven", "letter", seq, "err", err)
				continue
			}
			if err != nil {
				if len(out.Redriven) > 0 {
					err = fmt.Errorf("%w (letters redriven before it: %d)", err, len(out.Redriven))
				}
				return out, err
			}
			out.Redriven = append(out.Redriven, r)
			s.log.Info("dead letter redriven", "letter", seq, "subject", r.Subject, "seq", r.Seq, "admitted", len(r.Admitted), "duplicate", r.Duplicate)
		}
		return out, nil
	}
	return DLQResponse{}, errorf(http.StatusBadRequest, "dlq: unknown action %q (want %s or %s)", req.Action, DLQShow, DLQRedrive)
}

// tickRoom checks JL_IN's room, and the agent's share of it, for the ticks
// a trigger or backfill is about to write, as the ingest does for events:
// a refusal answers 503 with the reason, is logged and recorded in
// JL_AUDIT (decision no_room), and writes none of them.
func (s *Service) tickRoom(ctx context.Context, req SchedulesRequest, msgs []*nats.Msg) error {
	size := 0
	for _, m := range msgs {
		size = max(size, len(m.Data))
	}
	w := streams.Write{Source: "schedule-" + string(req.Action), Agents: map[string]int{req.Agent: len(msgs)}, Bytes: size + 1024}
	refused, err := s.room.Take(ctx, w)
	if err == nil {
		err = refused[req.Agent]
	}
	if err == nil {
		return nil
	}
	s.log.Warn("JL_IN has no room for a schedule's ticks fired by hand", "agent", req.Agent, "schedule", req.Schedule, "action", req.Action, "ticks", len(msgs), "err", err)
	if subj, aerr := s.names.Audit("room", req.Agent); aerr == nil {
		b, _ := json.Marshal(map[string]any{"agent": req.Agent, "schedule": req.Schedule, "writer": w.Source, "ticks": len(msgs),
			"decision": "no_room", "reason": err.Error(), "time": time.Now().UTC()})
		if _, perr := s.js.Publish(ctx, subj, b); perr != nil {
			s.log.Warn("audit a refused schedule fire", "agent", req.Agent, "schedule", req.Schedule, "err", perr)
		}
	}
	return errorf(http.StatusServiceUnavailable, "schedules %s %s/%s: %d ticks: %v", req.Action, req.Agent, req.Schedule, len(msgs), err)
}
