package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publish makes one JetStream publish and returns the stream sequence
// the message got: what jetstream's PublishMsg does without options (a
// request, made again while no stream answers, as DefaultPubRetryWait
// and DefaultPubRetryAttempts say; its errors), with the answer read by
// parseAck, which reads the answer of a write that landed without
// encoding/json. A step makes one or two of these.
func publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (uint64, error) {
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		// A leader change, say: a stream answers again soon.
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return 0, err
	}
	return parseAck(resp.Data)
}

// parseAck reads a publish's answer as jetstream's PublishMsg does: the
// sequence, or the server's error (a *jetstream.APIError, wrapped). The
// answer of a write that landed, {"stream":"<name>","seq":<n>} (with
// ,"duplicate":true), is read by hand; any other answer by
// encoding/json.
func parseAck(data []byte) (uint64, error) {
	if seq, ok := plainAck(data); ok {
		return seq, nil
	}
	var resp struct {
		Error  *jetstream.APIError `json:"error,omitempty"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("nats: %w", resp.Error)
	}
	if resp.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return resp.Seq, nil
}

// plainAck reads exactly {"stream":"<name>","seq":<n>} or the same with
// ,"duplicate":true before the brace, where the name is one or more
// bytes without a quote, a backslash or a control character and n a
// decimal uint64 without leading zeros; false for anything else.
func plainAck(b []byte) (uint64, bool) {
	const head, mid = `{"stream":"`, `","seq":`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return 0, false
	}
	i := len(head)
	for i < len(b) && b[i] != '"' {
		if b[i] == '\\' || b[i] < 0x20 {
			return 0, false
		}
		i++
	}
	if i == len(head) || len(b)-i < len(mid) || string(b[i:i+len(mid)]) != mid {
		return 0, false
	}
	i += len(mid)
	j := i
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		j++
	}
	if j == i || b[i] == '0' && j-i > 1 {
		return 0, false
	}
	if rest := string(b[j:]); rest != "}" && rest != `,"duplicate":true}` {
		return 0, false
	}
	seq, err := strconv.ParseUint(string(b[i:j]), 10, 64)
	return seq, err == nil
}

// acks hears the answers of a store's creates sent together (Settle),
// on one subscription of its own, made at the first of them: what
// jetstream's asynchronous publish does, without a future per message,
// and with the answers read by parseAck.
type acks struct {
	once   sync.Once
	err    error
	prefix string
	mu     sync.Mutex
	next   uint64
	wait   map[string]chan ackResult
}

type ackResult struct {
	seq uint64
	err error
}

func (a *acks) start(nc *nats.Conn) error {
	a.once.Do(func() {
		a.prefix = nc.NewRespInbox() + "."
		a.wait = map[string]chan ackResult{}
		_, a.err = nc.Subscribe(a.prefix+"*", a.answer)
	})
	return a.err
}

// answer hands the answer m to the create that waits for it.
func (a *acks) answer(m *nats.Msg) {
	token := strings.TrimPrefix(m.Subject, a.prefix)
	a.mu.Lock()
	ch := a.wait[token]
	delete(a.wait, token)
	a.mu.Unlock()
	if ch == nil {
		// Given up on: its create is made again alone.
		return
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		ch <- ackResult{err: nats.ErrNoResponders}
		return
	}
	seq, err := parseAck(m.Data)
	ch <- ackResult{seq, err}
}

// send publishes m with a reply subject of a's; the answer comes on the
// channel returned, which forget gives up.
func (a *acks) send(nc *nats.Conn, m *nats.Msg) (token string, ch chan ackResult, err error) {
	a.mu.Lock()
	a.next++
	token = strconv.FormatUint(a.next, 36)
	ch = make(chan ackResult, 1)
	a.wait[token] = ch
	a.mu.Unlock()
	m.Reply = a.prefix + token
	if err := nc.PublishMsg(m); err != nil {
		a.forget(token)
		return "", nil, err
	}
	return token, ch, nil
}

func (a *acks) forget(token string) {
	a.mu.Lock()
	delete(a.wait, token)
	a.mu.Unlock()
}
