package slack

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jetloop/jetloop/control"
)

// mentionRE matches the mentions that lead a message: <@U123>, <@U123|name>.
var mentionRE = regexp.MustCompile(`^(\s*<@[A-Z0-9]+(\|[^>]*)?>)+`)

// unescape undoes the escaping of Slack's message text.
var unescape = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// ParseCommand reads the command in a message's text (see the package
// documentation) as a control message without its envelope. ok is false
// when the text is no command; err says what is wrong with one that is
// (approve without a call id, say).
func ParseCommand(text string) (m control.Message, ok bool, err error) {
	text = strings.TrimSpace(mentionRE.ReplaceAllString(text, ""))
	text = unescape.Replace(text)
	word, rest, _ := strings.Cut(text, " ")
	if i := strings.IndexAny(word, "\n\t"); i >= 0 {
		word, rest = word[:i], word[i+1:]+" "+rest
	}
	rest = strings.TrimSpace(rest)
	switch strings.ToLower(word) {
	case "stop":
		m = control.Message{Verb: control.Cancel, Text: rest}
	case "pause":
		m = control.Message{Verb: control.Interrupt, Text: rest}
	case "resume":
		m = control.Message{Verb: control.Resume, Text: rest}
	case "steer":
		m = control.Message{Verb: control.Steer, Text: rest}
	case "approve", "deny":
		id, note, _ := strings.Cut(rest, " ")
		verb := control.Approve
		if strings.EqualFold(word, "deny") {
			verb = control.Deny
		}
		m = control.Message{Verb: verb, CallID: id, Text: strings.TrimSpace(note)}
	default:
		return control.Message{}, false, nil
	}
	if err := m.Validate(); err != nil {
		return control.Message{}, true, fmt.Errorf("%q: %w", strings.ToLower(word), err)
	}
	return m, true, nil
}

// stripMentions removes the mentions that lead a message.
func stripMentions(text string) string { return mentionRE.ReplaceAllString(text, "") }
