package slack

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jetloop/jetloop/control"
)

// FuzzParseCommand: any message text is no command, a command with a
// clear error, or a valid control message.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"<@EEEEEEEEE> hello world", "stop", "<@U1|bot> steer focus &amp; test", "approve toolu_01 ok",
		"deny", "resume\nnow", "steer\t", "<@U1><@U2> pause please", "STEER é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		m, ok, err := ParseCommand(text)
		switch {
		case !ok && err != nil:
			t.Fatalf("no command, yet an error: %v", err)
		case err != nil:
			if !errors.Is(err, control.ErrInvalid) {
				t.Fatalf("error does not wrap control.ErrInvalid: %v", err)
			}
		case ok:
			if verr := m.Validate(); verr != nil {
				t.Fatalf("accepted %+v: %v", m, verr)
			}
		}
	})
}

// FuzzParseRequest: any verified body and content type is refused with a
// status, ignored with a reason, or read as a request naming its delivery.
func FuzzParseRequest(f *testing.F) {
	f.Add("application/json", []byte(`{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"XXXXXXXXX","api_app_id":"YYYYYYYYY","event":{"type":"app_mention","user":"AAAAAAAAA","text":"<@EEEEEEEEE> hello world","client_msg_id":"477cc591-ch73-a14z-4db8-g0cd76321bec","ts":"1531431954.000073","channel":"TTTTTTTTT","event_ts":"1531431954.000073"},"type":"event_callback","event_id":"TvBP7LRED7","event_time":1531431954,"authed_users":["EEEEEEEEE"]}`))
	f.Add("application/json", []byte(`{"type":"url_verification","challenge":"c"}`))
	f.Add("application/x-www-form-urlencoded", []byte(`team_id=T1&channel_id=C1&text=stop&trigger_id=1.2.3`))
	f.Add("application/json; charset=utf-8", []byte(`{"type":"event_callback","event_id":"E","event":{"type":"message","subtype":"message_changed"}}`))
	f.Add("text/plain", []byte(`stop`))
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		in, err := parseRequest(ctype, body)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status < 400 || he.status > 499 {
				t.Fatalf("error without a 4xx status: %v", err)
			}
			return
		}
		if in.challenge != "" || in.ignore != "" {
			return
		}
		if in.id == "" {
			t.Fatalf("request without a delivery id: %+v", in)
		}
		if !utf8.ValidString(in.text) && strings.HasPrefix(ctype, "application/json") {
			t.Fatalf("JSON text is not UTF-8: %q", in.text)
		}
	})
}

// FuzzParseInteraction: any body is refused with a 400 or read as an
// interaction; nothing panics.
func FuzzParseInteraction(f *testing.F) {
	for _, s := range []string{
		`payload=%7B%22type%22%3A%22block_actions%22%2C%22actions%22%3A%5B%7B%22action_id%22%3A%22jetloop_approve%22%2C%22value%22%3A%22%7B%7D%22%7D%5D%7D`,
		`payload=`, `payload=%7B`, `a=b`, `%zz`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := parseInteraction(body)
		var he *httpError
		if err != nil && (!errors.As(err, &he) || he.status != 400) {
			t.Fatalf("error %v is not a 400 refusal", err)
		}
	})
}
