package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrFull means a stream holds what jetloop lets it hold: new writes are
// refused until something is consumed or removed.
var ErrFull = errors.New("stream full")

// ErrShare is ErrFull for one agent or one source that holds its share of
// the room: the others are still let through.
var ErrShare = fmt.Errorf("%w: share used", ErrFull)

// roomEvery is how long a Room trusts what it last read of its stream,
// and nearEvery how long near its line (or an agent near its share): what
// this process writes meanwhile it counts itself, so a flood near the
// line costs ten reads a second, not one a write.
const (
	roomEvery = time.Second
	nearEvery = roomEvery / 10
)

// Defaults of Shares.
const (
	// DefaultAgentShare is the part of JL_IN's room, in percent, that one
	// agent's subjects may hold.
	DefaultAgentShare = 25
	// DefaultSourceShare is the part of JL_IN's room, in percent, that
	// events of one source may add within DefaultSourceWindow.
	DefaultSourceShare = 50
	// DefaultSourceWindow is the window of a source's share.
	DefaultSourceWindow = 10 * time.Minute
)

// Shares bound what one agent and one source may take of a Room, so that
// a flood of events for one agent, or from one source (signed GitHub
// deliveries anyone can cause by commenting on a public repository), is
// refused while every other agent and source is still admitted.
type Shares struct {
	// Agent is the most of the room, in percent, that the subjects of one
	// agent (its sessions' events, pending bursts and throttled events,
	// timers and schedule messages) may hold, counted by the server. Zero:
	// DefaultAgentShare; 100 or more: no share.
	Agent int
	// Source is the most of the room, in percent, that events of one
	// source (github, slack, events, request, delegate) may add within
	// SourceWindow, counted by this process. Zero: DefaultSourceShare; 100
	// or more: no share.
	Source int
	// SourceWindow is the window of Source. Zero: DefaultSourceWindow.
	SourceWindow time.Duration
}

func (s *Shares) setDefaults() {
	if s.Agent <= 0 {
		s.Agent = DefaultAgentShare
	}
	if s.Source <= 0 {
		s.Source = DefaultSourceShare
	}
	if s.SourceWindow <= 0 {
		s.SourceWindow = DefaultSourceWindow
	}
}

// Validate says what is wrong with s.
func (s Shares) Validate() error {
	if s.Agent < 0 || s.Source < 0 || s.SourceWindow < 0 {
		return fmt.Errorf("streams: shares of JL_IN: agent %d%%, source %d%%, window %s: none may be negative", s.Agent, s.Source, s.SourceWindow)
	}
	return nil
}

// Room refuses writes to a stream that holds half its max_bytes or half
// its max_msgs: for a stream the server cannot make refuse new messages
// itself (JL_IN: a stream with message schedules cannot use discard
// new), so that its limits, where the oldest messages would go, are never
// reached. With shares (NewInRoom), it also refuses the writes of an
// agent or a source past its share of that room. Safe for concurrent use.
type Room struct {
	js     jetstream.JetStream
	name   string
	names  Names
	shares Shares
	// reserve is how far past half its limits a write that settles
	// admitted work (Reserve) may take the stream.
	reserve bool

	mu     sync.Mutex
	stream jetstream.Stream
	at     time.Time
	info   *jetstream.StreamInfo
	// msgs and bytes are what this process let through since it last
	// read the stream.
	msgs, bytes uint64
	agents      map[string]*agentHeld
	sources     map[string]*window
	// counters count what the stream holds of each agent's subjects.
	counters map[string]jetstream.Consumer
}

// agentHeld is what the stream held of one agent's subjects when it was
// last read, and what this process let through since.
type agentHeld struct {
	at          time.Time
	held        uint64
	msgs, bytes uint64
	// over: its last write was refused; until the next read it is
	// refused without reading, so a flood costs one read a second.
	over bool
	// sizes and writes are the bytes and messages of every write of the
	// agent this process checked, kept across reads: the stream counts an
	// agent's messages, not its bytes, and its average message (ticks,
	// small events of other agents) must not stand for an agent's large
	// ones.
	sizes, writes uint64
}

// size is the bytes of one of the agent's messages: the larger of the
// stream's average and the average of the agent's writes checked here.
func (a *agentHeld) size(avg uint64) uint64 {
	if a.writes > 0 {
		return max(avg, a.sizes/a.writes)
	}
	return avg
}

// NewRoom watches the stream name.
func NewRoom(js jetstream.JetStream, name string) *Room { return &Room{js: js, name: name} }

// NewInRoom watches JL_IN and bounds each agent and source by sh.
func NewInRoom(js jetstream.JetStream, names Names, sh Shares) *Room {
	sh.setDefaults()
	return &Room{js: js, name: names.StreamIn(), names: names, shares: sh, agents: map[string]*agentHeld{}, sources: map[string]*window{}, counters: map[string]jetstream.Consumer{}}
}

// Reserve returns a view of the same room for writes that settle work
// already admitted (a delegated child's answer to its parent, the timeout
// of a wait, a delegation's deadline): they may take the stream to three
// quarters of its limits, where new events stop at half, so that a full
// room refuses new work before it refuses what finishes old work. It
// shares r's counts.
func (r *Room) Reserve() *Reserve { return &Reserve{r: r} }

// Reserve is a Room for writes that settle admitted work.
type Reserve struct{ r *Room }

// Check is Room.Check at three quarters of the stream's limits.
func (v *Reserve) Check(ctx context.Context, msgs, bytes int) error {
	return v.r.check(ctx, msgs, bytes, 3)
}

// near reports whether the stream held more than 4/5 of the line at
// quarters of its limits (40% of them for the line at half) when it was
// last read.
func (r *Room) near(quarters uint64) bool {
	c, st := r.info.Config, r.info.State
	return c.MaxBytes > 0 && (st.Bytes+r.bytes)*5 > uint64(c.MaxBytes)*quarters || c.MaxMsgs > 0 && (st.Msgs+r.msgs)*5 > uint64(c.MaxMsgs)*quarters
}

// Check returns ErrFull, saying how full, when writing msgs messages of
// bytes bytes would take the stream over half its limits. What it read of
// the stream is at most a second old, and a tenth of a second once the
// stream is near the line; when it cannot read it, it answers from what
// it read last.
//
// msgs and bytes are what the caller is about to write; they count, until
// the next read of the stream, as written.
func (r *Room) Check(ctx context.Context, msgs, bytes int) error {
	return r.check(ctx, msgs, bytes, 2)
}

func (r *Room) check(ctx context.Context, msgs, bytes int, quarters uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fresh(ctx, quarters); err != nil {
		return err
	}
	return r.take(msgs, bytes, quarters)
}

// fresh reads the stream when what it read is older than roomEvery, or
// than nearEvery near the line at quarters of its limits: a burst of
// other processes must not carry it far past.
func (r *Room) fresh(ctx context.Context, quarters uint64) error {
	if age := time.Since(r.at); r.info != nil && age <= roomEvery && (age <= nearEvery || !r.near(quarters)) {
		return nil
	}
	info, err := r.read(ctx)
	if err == nil {
		r.info, r.at = info, time.Now()
		r.msgs, r.bytes = 0, 0
	} else if r.info == nil {
		return fmt.Errorf("streams: room of %s: %w", r.name, err)
	}
	return nil
}

// read reads the stream's info.
func (r *Room) read(ctx context.Context) (*jetstream.StreamInfo, error) {
	if r.stream == nil {
		s, err := r.js.Stream(ctx, r.name)
		if err != nil {
			return nil, err
		}
		r.stream = s
		return s.CachedInfo(), nil
	}
	return r.stream.Info(ctx)
}

// take counts msgs and bytes as written, or returns ErrFull when they
// would take the stream over quarters of its limits.
func (r *Room) take(msgs, bytes int, quarters uint64) error {
	c, st := r.info.Config, r.info.State
	held, count := st.Bytes+r.bytes+uint64(bytes), st.Msgs+r.msgs+uint64(msgs)
	line := "half"
	if quarters == 3 {
		line = "three quarters of"
	}
	switch {
	case c.MaxBytes > 0 && held > uint64(c.MaxBytes)*quarters/4:
		return fmt.Errorf("%w: %s would hold %d bytes, over %s its max_bytes %d: new events are refused until retention removes finished sessions' events or the trimming of living sessions' consumed events (past their read_event horizon) frees room, or the storage budget grows",
			ErrFull, r.name, held, line, c.MaxBytes)
	case c.MaxMsgs > 0 && count > uint64(c.MaxMsgs)*quarters/4:
		return fmt.Errorf("%w: %s would hold %d messages, over %s its max_msgs %d: new events are refused until retention removes finished sessions' events or the trimming of living sessions' consumed events (past their read_event horizon) frees room, or the storage budget grows",
			ErrFull, r.name, count, line, c.MaxMsgs)
	}
	r.msgs, r.bytes = r.msgs+uint64(msgs), r.bytes+uint64(bytes)
	return nil
}

// Write is what one writer is about to add to JL_IN.
type Write struct {
	// Source is where the events come from (github, slack, events,
	// request, delegate, or a runtime writer's name); "" counts in no
	// source's share.
	Source string
	// Agents are the messages for each agent.
	Agents map[string]int
	// Bytes is about what one message takes.
	Bytes int
}

// Take checks w against the room, the source's share and each agent's
// share, and counts what it lets through as written. err (ErrFull) refuses
// the whole write: the stream, or the source, has no room. Otherwise
// refused names each agent that holds its share (ErrShare), whose
// messages must not be written; the others may be.
func (r *Room) Take(ctx context.Context, w Write) (refused map[string]error, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fresh(ctx, 2); err != nil {
		return nil, err
	}
	c := r.info.Config
	for agent, n := range w.Agents {
		if n == 0 || r.shares.Agent >= 100 || r.agents == nil {
			continue
		}
		if err := r.agentTake(ctx, agent, n, n*w.Bytes); err != nil {
			if refused == nil {
				refused = map[string]error{}
			}
			refused[agent] = err
		}
	}
	msgs := 0
	for agent, n := range w.Agents {
		if refused[agent] == nil {
			msgs += n
		}
	}
	if msgs == 0 {
		return refused, nil
	}
	sw := r.sources[w.Source]
	if w.Source != "" && r.sources != nil && r.shares.Source < 100 {
		if sw == nil {
			sw = newWindow(r.shares.SourceWindow)
			r.sources[w.Source] = sw
		}
		m, b := sw.sum(time.Now())
		lm, lb := share(c.MaxMsgs, r.shares.Source), share(c.MaxBytes, r.shares.Source)
		switch {
		case c.MaxMsgs > 0 && m+uint64(msgs) > lm:
			r.undo(w, refused)
			return nil, fmt.Errorf("%w: source %s added %d messages to %s within %s; its share is %d%% of the room (%d messages): its events are refused until the window moves on, other sources' are not",
				ErrShare, w.Source, m, r.name, r.shares.SourceWindow, r.shares.Source, lm)
		case c.MaxBytes > 0 && b+uint64(msgs*w.Bytes) > lb:
			r.undo(w, refused)
			return nil, fmt.Errorf("%w: source %s added %d bytes to %s within %s; its share is %d%% of the room (%d bytes): its events are refused until the window moves on, other sources' are not",
				ErrShare, w.Source, b, r.name, r.shares.SourceWindow, r.shares.Source, lb)
		}
	}
	if err := r.take(msgs, msgs*w.Bytes, 2); err != nil {
		r.undo(w, refused)
		return nil, err
	}
	if sw != nil {
		sw.add(time.Now(), uint64(msgs), uint64(msgs*w.Bytes))
	}
	return refused, nil
}

// undo takes back what agentTake counted for the agents of w it let
// through.
func (r *Room) undo(w Write, refused map[string]error) {
	for agent, n := range w.Agents {
		if a := r.agents[agent]; a != nil && refused[agent] == nil && a.msgs >= uint64(n) {
			a.msgs -= uint64(n)
			a.bytes -= min(a.bytes, uint64(n*w.Bytes))
		}
	}
}

// agentTake checks an agent's share, reading what the stream holds of its
// subjects at most a second ago, or a tenth of a second once it is near
// its share.
func (r *Room) agentTake(ctx context.Context, agent string, msgs, bytes int) error {
	c := r.info.Config
	lm, lb := share(c.MaxMsgs, r.shares.Agent), share(c.MaxBytes, r.shares.Agent)
	a := r.agents[agent]
	// The bytes of one message, as the stream holds them on average.
	avg := func() uint64 {
		if st := r.info.State; st.Msgs > 0 {
			return st.Bytes / st.Msgs
		}
		return 0
	}
	near := func() bool {
		return lm > 0 && (a.held+a.msgs)*5 > lm*4 || lb > 0 && (a.held*a.size(avg())+a.bytes)*5 > lb*4
	}
	if a == nil || time.Since(a.at) > roomEvery || near() && !a.over && time.Since(a.at) > nearEvery {
		filter, err := r.names.InAgentAll(agent)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrShare, err)
		}
		held, err := r.agentCount(ctx, agent, filter)
		switch {
		case err == nil:
			if a == nil {
				a = &agentHeld{}
				if len(r.agents) > 4096 {
					clear(r.agents) // Only a cache.
				}
				r.agents[agent] = a
			}
			a.at, a.held, a.msgs, a.bytes, a.over = time.Now(), held, 0, 0, false
		case a == nil:
			return fmt.Errorf("streams: room of agent %s in %s: %w", agent, r.name, err)
		}
	}
	a.sizes, a.writes = a.sizes+uint64(bytes), a.writes+uint64(msgs)
	count := a.held + a.msgs + uint64(msgs)
	held := a.held*a.size(avg()) + a.bytes + uint64(bytes)
	switch {
	case lm > 0 && count > lm:
		a.over = true
		return fmt.Errorf("%w: agent %s would hold %d messages in %s; its share is %d%% of the room (%d messages): its events are refused until its sessions consume them and their consumed events are trimmed or removed by retention; other agents' are not",
			ErrShare, agent, count, r.name, r.shares.Agent, lm)
	case lb > 0 && held > lb:
		a.over = true
		return fmt.Errorf("%w: agent %s would hold about %d bytes in %s; its share is %d%% of the room (%d bytes): its events are refused until its sessions consume them and their consumed events are trimmed or removed by retention; other agents' are not",
			ErrShare, agent, held, r.name, r.shares.Agent, lb)
	}
	a.msgs, a.bytes = a.msgs+uint64(msgs), a.bytes+uint64(bytes)
	return nil
}

// counterIdle is how long a counter no one reads stays on the server.
const counterIdle = 10 * time.Minute

// agentCount reads how many messages the stream holds on an agent's
// subjects (filter): the pending count of a filtered consumer of the
// Room's own that nothing pulls from, which the server keeps as messages
// are stored and removed, so that a read is one small answer whatever the
// number of the agent's sessions (a stream info with a subject filter
// lists every one of them).
func (r *Room) agentCount(ctx context.Context, agent, filter string) (uint64, error) {
	if r.stream == nil {
		s, err := r.js.Stream(ctx, r.name)
		if err != nil {
			return 0, err
		}
		r.stream = s
	}
	if c := r.counters[agent]; c != nil {
		info, err := c.Info(ctx)
		if err == nil {
			return info.NumPending, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, err
		}
		delete(r.counters, agent) // idle past counterIdle: made again
	}
	// Briefly: where it cannot be made, the fallback needs time too.
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := r.stream.CreateConsumer(cctx, jetstream.ConsumerConfig{
		Description:   "jetloop: what " + r.name + " holds of agent " + agent + " (its share of the room)",
		FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: counterIdle, MemoryStorage: true, Replicas: 1,
	})
	if err != nil {
		// No consumer now (a cluster without a meta leader, say): the
		// stream's leader still answers a filtered info, longer.
		info, ierr := r.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
		if ierr != nil {
			return 0, fmt.Errorf("count agent %s: %w (a filtered info: %w)", agent, err, ierr)
		}
		var held uint64
		for _, n := range info.State.Subjects {
			held += n
		}
		return held, nil
	}
	if len(r.counters) > 4096 {
		clear(r.counters) // Only a cache: the server removes idle ones.
	}
	r.counters[agent] = c
	return c.CachedInfo().NumPending, nil
}

// share is percent of the room of a stream with the server limit limit
// (half of it), at least 1; 0 for a stream without the limit.
func share(limit int64, percent int) uint64 {
	if limit <= 0 {
		return 0
	}
	return uint64(max(1, limit/2*int64(percent)/100))
}

// window sums what was added within a duration, in ten slots.
type window struct {
	slot  time.Duration
	start [10]time.Time
	msgs  [10]uint64
	bytes [10]uint64
}

func newWindow(d time.Duration) *window { return &window{slot: max(d/10, time.Millisecond)} }

func (w *window) add(now time.Time, msgs, bytes uint64) {
	at := now.Truncate(w.slot)
	i := int(at.UnixNano()/int64(w.slot)) % len(w.start)
	if !w.start[i].Equal(at) {
		w.start[i], w.msgs[i], w.bytes[i] = at, 0, 0
	}
	w.msgs[i] += msgs
	w.bytes[i] += bytes
}

func (w *window) sum(now time.Time) (msgs, bytes uint64) {
	from := now.Truncate(w.slot).Add(-w.slot * time.Duration(len(w.start)-1))
	for i := range w.start {
		if !w.start[i].Before(from) {
			msgs += w.msgs[i]
			bytes += w.bytes[i]
		}
	}
	return msgs, bytes
}
