package slack

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/jetloop/jetloop/streams"
)

// MaxChannelsFile bounds a channels file, in bytes.
const MaxChannelsFile = 1 << 20

// Channels maps a Slack channel id (such as C0123ABCD) to the session its
// commands control.
type Channels map[string]streams.SessionRef

var channelRE = regexp.MustCompile(`^[A-Z0-9]{1,32}$`)

// channelsFile is the file's layout:
//
//	channels:
//	  C0123ABCD: demo/main
//	  C0456EFGH: pr-reviewer/octo/repo#12
type channelsFile struct {
	Channels map[string]string `yaml:"channels"`
}

// ParseChannels reads a channels file: YAML (or JSON) with one key,
// channels, mapping each channel id to AGENT/SESSION (the session may
// itself contain '/'). Unknown keys, malformed ids and names are refused.
func ParseChannels(data []byte) (Channels, error) {
	if len(data) > MaxChannelsFile {
		return nil, fmt.Errorf("slack: channels: %d bytes, max %d", len(data), MaxChannelsFile)
	}
	var f channelsFile
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("slack: channels: %w", err)
	}
	out := make(Channels, len(f.Channels))
	for ch, target := range f.Channels {
		if !channelRE.MatchString(ch) {
			return nil, fmt.Errorf("slack: channels: %q is not a Slack channel id such as C0123ABCD", ch)
		}
		agent, session, ok := strings.Cut(target, "/")
		if !ok || agent == "" || session == "" {
			return nil, fmt.Errorf("slack: channels: %s: %q: want AGENT/SESSION", ch, target)
		}
		ref, err := streams.NewSessionRef(agent, session)
		if err != nil {
			return nil, fmt.Errorf("slack: channels: %s: %w", ch, err)
		}
		out[ch] = ref
	}
	return out, nil
}

// LoadChannels reads the channels file at path (see ParseChannels).
func LoadChannels(path string) (Channels, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("slack: channels: %w", err)
	}
	c, err := ParseChannels(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}
