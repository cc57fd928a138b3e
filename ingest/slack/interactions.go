package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/streams"
)

// Action ids of the buttons the worker posts with a call that waits for
// approval; their value is ApprovalValue as JSON.
const (
	ActionApprove = "jetloop_approve"
	ActionDeny    = "jetloop_deny"
)

// ApprovalValue names the call an Approve or Deny button answers.
type ApprovalValue struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	Call    string `json:"call"`
}

// interaction is the part of a block_actions payload the receiver reads.
type interaction struct {
	Type string `json:"type"`
	Team struct {
		ID string `json:"id"`
	} `json:"team"`
	User struct {
		ID string `json:"id"`
	} `json:"user"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		ActionTS string `json:"action_ts"`
	} `json:"actions"`
}

// ServeInteraction is POST /chat/slack/interactions: a click on an
// Approve or Deny button, signed like every Slack request, becomes an
// approve or deny of the call it names, when the channel it was clicked in
// is mapped to that call's session.
func (r *Receiver) ServeInteraction(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), r.cfg.Timeout)
	defer cancel()
	resp, err := r.interaction(ctx, req, w)
	if err != nil {
		status := http.StatusServiceUnavailable
		var he *httpError
		if errors.As(err, &he) {
			status = he.status
		}
		if status >= 500 {
			w.Header().Set("Retry-After", "1")
			r.log.Warn("slack interaction not handled; Slack will retry", "err", err)
		} else {
			r.log.Info("slack interaction refused", "status", status, "err", err)
		}
		writeJSON(w, status, map[string]any{"ok": false, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (r *Receiver) interaction(ctx context.Context, req *http.Request, w http.ResponseWriter) (_ any, err error) {
	if err := r.checkHeaders(req.Header); err != nil {
		gate.Unread(w)
		return nil, err
	}
	adm, err := r.cfg.Gate.Admit(r.cfg.Gate.Unverified(), req, MaxBody)
	if err != nil {
		gate.Unread(w)
		return nil, refuse(gate.Status(err), "%v", err)
	}
	defer adm.Release()
	deadline, _ := ctx.Deadline()
	body, err := adm.ReadBody(w, req, MaxBody, deadline)
	if err != nil {
		if st := gate.Status(err); st != 0 {
			return nil, refuse(st, "%v", err)
		}
		return nil, refuse(http.StatusBadRequest, "%v", err)
	}
	key, err := r.verify(ctx, req.Header, body)
	if err != nil {
		return nil, err
	}
	defer func() {
		var refused *httpError
		if err == nil || errors.As(err, &refused) {
			return
		}
		if derr := r.kv.Delete(context.WithoutCancel(ctx), key); derr != nil {
			r.log.Warn("slack: forget signature of a request not handled", "err", derr)
		}
	}()
	in, err := parseInteraction(body)
	if err != nil {
		return nil, err
	}
	log := r.log.With("team", in.Team.ID, "channel", in.Channel.ID, "user", in.User.ID)
	if in.Type != "block_actions" || len(in.Actions) != 1 {
		return map[string]any{"ok": false, "text": fmt.Sprintf("ignored: interaction %q with %d actions", in.Type, len(in.Actions))}, nil
	}
	a := in.Actions[0]
	verb := control.Approve
	switch a.ActionID {
	case ActionApprove:
	case ActionDeny:
		verb = control.Deny
	default:
		return map[string]any{"ok": false, "text": "ignored: action " + a.ActionID}, nil
	}
	var v ApprovalValue
	if err := json.Unmarshal([]byte(a.Value), &v); err != nil || v.Call == "" {
		return nil, refuse(http.StatusBadRequest, "action %s: value %q: want the call it answers", a.ActionID, a.Value)
	}
	ref, ok := r.cfg.Channels[in.Channel.ID]
	if !ok || ref.Agent != v.Agent || ref.Session != v.Session {
		// Only the channel mapped to a session answers its calls.
		log.Info("slack approval from a channel not mapped to its session", "agent", v.Agent, "session", v.Session)
		return map[string]any{"ok": false, "text": fmt.Sprintf("channel %s does not control %s/%s", in.Channel.ID, v.Agent, v.Session)}, nil
	}
	m := control.Message{Verb: verb, CallID: v.Call, Text: "by <@" + in.User.ID + "> in Slack",
		ID: "action:" + in.Channel.ID + ":" + a.ActionTS + ":" + a.ActionID, Source: "/chat/slack/" + url.PathEscape(in.Team.ID), Time: r.cfg.Now()}
	return r.publish(ctx, log, ref, m)
}

// publish sends a control message once per id (Slack retries), after the
// runtime's check.
func (r *Receiver) publish(ctx context.Context, log *slog.Logger, ref streams.SessionRef, m control.Message) (any, error) {
	if prev, seen, err := r.seen.Seen(ctx, sourceEvent+"/interaction", m.ID); err != nil {
		return nil, err
	} else if seen {
		var out map[string]any
		_ = json.Unmarshal(prev.Outcome, &out)
		return out, nil
	}
	if r.cfg.Check != nil {
		refusal, err := r.cfg.Check(ctx, ref, m)
		if err != nil {
			return nil, err
		}
		if refusal != "" {
			log.Info("slack approval refused", "agent", ref.Agent, "session", ref.Session, "verb", m.Verb, "why", refusal)
			return map[string]any{"ok": false, "text": refusal}, nil
		}
	}
	seq, err := control.Publish(ctx, r.js, r.names, ref, m)
	if errors.Is(err, control.ErrInvalid) {
		return map[string]any{"ok": false, "text": err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	log.Info("slack approval published", "agent", ref.Agent, "session", ref.Session, "verb", m.Verb, "call", m.CallID, "seq", seq)
	out := map[string]any{"ok": true, "verb": m.Verb, "seq": seq, "call": m.CallID,
		"text": fmt.Sprintf("%s of %s sent to %s", m.Verb, m.CallID, ref)}
	b, _ := json.Marshal(out)
	if err := r.seen.Record(ctx, sourceEvent+"/interaction", m.ID, b); err != nil {
		log.Warn("slack: remember handled interaction", "err", err)
	}
	return out, nil
}

// parseInteraction reads an interaction request's body: a form whose
// payload field is the interaction's JSON.
func parseInteraction(body []byte) (interaction, error) {
	var in interaction
	q, err := url.ParseQuery(string(body))
	if err != nil || q.Get("payload") == "" {
		return in, refuse(http.StatusBadRequest, "interaction: want a form with a payload")
	}
	if err := json.Unmarshal([]byte(q.Get("payload")), &in); err != nil {
		return in, refuse(http.StatusBadRequest, "interaction payload: %v", err)
	}
	return in, nil
}
