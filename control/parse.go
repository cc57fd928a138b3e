package control

import (
	"fmt"
	"mime"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// Parse reads the control message m carries, strictly. m must be on a
// control subject (<prefix>.ctl.<agent>.<session>, the tokens encoded as
// streams encodes them) and carry a CloudEvent (binary or structured mode,
// as events.FromMsg reads it) of type dev.jetloop.control.<verb> for a
// known verb, whose jlagent and jlsession extensions, when present, name
// the subject's session, whose datacontenttype, when present, is JSON, and
// whose data holds exactly the fields the verb takes (see Message.Validate).
// Every error wraps ErrInvalid and names what is wrong.
//
// Seq is set when m was delivered by a JetStream consumer.
func Parse(m *nats.Msg) (Message, error) {
	if m == nil {
		return Message{}, fmt.Errorf("control: %w: nil message", ErrInvalid)
	}
	msg, err := parse(m)
	if err != nil {
		return Message{}, fmt.Errorf("control: message on %q: %w", clip(m.Subject), err)
	}
	if m.Reply != "" {
		if md, err := m.Metadata(); err == nil {
			msg.Seq = md.Sequence.Stream
		}
	}
	return msg, nil
}

// ParseJS is Parse for a message a jetstream consumer delivered; Seq is its
// sequence in JL_CTL.
func ParseJS(m jetstream.Msg) (Message, error) {
	msg, err := Parse(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if err != nil {
		return Message{}, err
	}
	if md, err := m.Metadata(); err == nil {
		msg.Seq = md.Sequence.Stream
	}
	return msg, nil
}

func parse(m *nats.Msg) (Message, error) {
	ref, err := refOf(m.Subject)
	if err != nil {
		return Message{}, err
	}
	e, err := events.FromMsg(m)
	if err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	name, ok := strings.CutPrefix(e.Type(), events.ControlType(""))
	if !ok {
		return Message{}, fmt.Errorf("%w: type %q is not %s<verb>", ErrInvalid, clip(e.Type()), events.ControlType(""))
	}
	verb, err := ParseVerb(name)
	if err != nil {
		return Message{}, err
	}
	for _, x := range []struct{ ext, want string }{{events.ExtAgent, ref.Agent}, {events.ExtSession, ref.Session}} {
		v, ok := e.Extensions()[x.ext]
		if !ok {
			continue
		}
		if s, _ := v.(string); s != x.want {
			return Message{}, fmt.Errorf("%w: extension %s is %q but the subject names %q", ErrInvalid, x.ext, clip(fmt.Sprint(v)), clip(x.want))
		}
	}
	if ct := e.DataContentType(); ct != "" && !isJSON(ct) {
		return Message{}, fmt.Errorf("%w: datacontenttype %q: want application/json", ErrInvalid, clip(ct))
	}
	out := Message{Verb: verb, ID: e.ID(), Source: e.Source(), Time: e.Time(), Ref: ref}
	if err := decodeData(verb, e.Data(), &out); err != nil {
		return Message{}, err
	}
	if err := out.validateFor(ref); err != nil {
		return Message{}, err
	}
	return out, nil
}

// refOf returns the session of a control subject, which must be spelled
// exactly as streams.Names.Ctl spells it.
func refOf(subject string) (streams.SessionRef, error) {
	prefix, _, _ := strings.Cut(subject, ".")
	names, err := streams.NewNames(prefix)
	if err != nil {
		return streams.SessionRef{}, fmt.Errorf("%w: subject %q: %w", ErrInvalid, clip(subject), err)
	}
	parsed, err := names.ParseSession(subject)
	if err != nil {
		return streams.SessionRef{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ref, err := streams.NewSessionRef(parsed.Agent, parsed.Session)
	if err != nil {
		return streams.SessionRef{}, fmt.Errorf("%w: subject %q: %w", ErrInvalid, clip(subject), err)
	}
	if want := names.Ctl(ref); want != subject {
		return streams.SessionRef{}, fmt.Errorf("%w: subject %q is not a control subject (want %s)", ErrInvalid, clip(subject), clip(want))
	}
	return ref, nil
}

// isJSON reports whether media type ct is JSON: application/json or a
// +json suffix, with any parameters.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
