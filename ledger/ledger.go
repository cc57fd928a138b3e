package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// Bounds of an account.
const (
	// MaxParts bounds the sessions one account counts: a tree may have at
	// most this many sessions under any one of its runs.
	MaxParts = 1024
	// maxAttempts bounds the compare-and-set retries of one write.
	maxAttempts = 32
)

// Errors callers branch on.
var (
	// ErrNotFound: the session has no account.
	ErrNotFound = errors.New("ledger: no account")
	// ErrOtherRun: the account counts another run of its session (the run
	// reported for has ended and a later one opened the account).
	ErrOtherRun = errors.New("ledger: account is of another run")
	// ErrFull: the account counts MaxParts sessions already.
	ErrFull = errors.New("ledger: account counts too many sessions")
)

// Usage is what runs consumed: model calls (turns), tokens and cost.
type Usage struct {
	Turns        int     `json:"turns"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Turns: u.Turns + v.Turns, InputTokens: u.InputTokens + v.InputTokens,
		OutputTokens: u.OutputTokens + v.OutputTokens, CostUSD: u.CostUSD + v.CostUSD}
}

// Ceiling is the most a run and everything it delegates may consume;
// a zero field is no limit.
type Ceiling struct {
	MaxTurns   int     `json:"max_turns,omitempty"`
	MaxTokens  int64   `json:"max_tokens,omitempty"`
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// Reached returns the limit of c that u has reached, and why; "" when
// none. Turns bound model calls only (turns true asks about one).
func (c Ceiling) Reached(u Usage, turns bool) (limit, reason string) {
	switch {
	case turns && c.MaxTurns > 0 && u.Turns >= c.MaxTurns:
		return "max_turns", fmt.Sprintf("max_turns %d reached (%d used)", c.MaxTurns, u.Turns)
	case c.MaxTokens > 0 && u.Tokens() >= c.MaxTokens:
		return "max_tokens", fmt.Sprintf("max_tokens %d reached (%d used)", c.MaxTokens, u.Tokens())
	case c.MaxCostUSD > 0 && u.CostUSD >= c.MaxCostUSD:
		return "max_cost_usd", fmt.Sprintf("max_cost_usd %.4f reached (%.4f spent)", c.MaxCostUSD, u.CostUSD)
	}
	return "", ""
}

// Left is what c leaves after u; a field without a limit stays zero (no
// limit). A limit used up leaves a negative or zero value: see Exhausted.
func (c Ceiling) Left(u Usage) Ceiling {
	var l Ceiling
	if c.MaxTurns > 0 {
		l.MaxTurns = c.MaxTurns - u.Turns
	}
	if c.MaxTokens > 0 {
		l.MaxTokens = c.MaxTokens - u.Tokens()
	}
	if c.MaxCostUSD > 0 {
		l.MaxCostUSD = c.MaxCostUSD - u.CostUSD
	}
	return l
}

// Part is one session's cumulative usage within an account, as of step
// Step of its run.
type Part struct {
	Usage
	Step uint64 `json:"step"`
}

// Account is one run's account: its ceiling and the usage of every
// session counted in it, by "agent/session" (the run's own session among
// them).
type Account struct {
	// Session is the account's session, "agent/session".
	Session string `json:"session"`
	// Run names the run of the session the account counts.
	Run     string          `json:"run"`
	Ceiling Ceiling         `json:"ceiling"`
	Parts   map[string]Part `json:"parts"`
	Opened  time.Time       `json:"opened"`
	Updated time.Time       `json:"updated"`
}

// Total is the usage of every session the account counts.
func (a Account) Total() Usage {
	var u Usage
	for _, p := range a.Parts {
		u = u.Add(p.Usage)
	}
	return u
}

// Own is the usage of the account's own session.
func (a Account) Own() Usage { return a.Parts[a.Session].Usage }

// Store reads and writes accounts in jl_ledger.
type Store struct {
	kv    jetstream.KeyValue
	names streams.Names
	now   func() time.Time
}

// Open returns the store over the deployment's jl_ledger bucket (which
// streams.Provision creates).
func Open(ctx context.Context, js jetstream.JetStream, names streams.Names) (*Store, error) {
	kv, err := js.KeyValue(ctx, names.BucketLedger())
	if err != nil {
		return nil, fmt.Errorf("ledger: open bucket %s: %w", names.BucketLedger(), err)
	}
	return &Store{kv: kv, names: names, now: time.Now}, nil
}

// Get returns ref's account, ErrNotFound when it has none.
func (s *Store) Get(ctx context.Context, ref streams.SessionRef) (Account, error) {
	a, _, err := s.get(ctx, ref)
	return a, err
}

func (s *Store) get(ctx context.Context, ref streams.SessionRef) (Account, uint64, error) {
	e, err := s.kv.Get(ctx, s.names.LedgerKey(ref))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Account{}, 0, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return Account{}, 0, fmt.Errorf("ledger: read account of %s: %w", ref, err)
	}
	var a Account
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return Account{}, 0, fmt.Errorf("ledger: decode account of %s: %w", ref, err)
	}
	return a, e.Revision(), nil
}

// Delete removes ref's account, if it has one (retention, with the
// session).
func (s *Store) Delete(ctx context.Context, ref streams.SessionRef) error {
	if err := s.kv.Purge(ctx, s.names.LedgerKey(ref)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("ledger: delete account of %s: %w", ref, err)
	}
	return nil
}

// OpenAccount opens the account of ref's run with its ceiling and the
// session's own usage so far. An account of the same run already there
// is kept as it is (opening again after a crash changes nothing); one of
// another run is replaced.
func (s *Store) OpenAccount(ctx context.Context, ref streams.SessionRef, run string, ceil Ceiling, own Part) (Account, error) {
	return s.update(ctx, ref, func(a *Account, found bool) error {
		if found && a.Run == run {
			return errUnchanged
		}
		now := s.now().UTC()
		*a = Account{Session: ref.String(), Run: run, Ceiling: ceil, Parts: map[string]Part{ref.String(): own}, Opened: now, Updated: now}
		return nil
	})
}

// Report sets who's part in the account of ref's run to p, unless the
// part recorded is of a later step already. ErrOtherRun: the account
// counts another run; ErrNotFound: there is none.
func (s *Store) Report(ctx context.Context, ref streams.SessionRef, run, who string, p Part) (Account, error) {
	return s.update(ctx, ref, func(a *Account, found bool) error {
		switch {
		case !found:
			return fmt.Errorf("%w: %s", ErrNotFound, ref)
		case a.Run != run:
			return fmt.Errorf("%w: %s counts run %s, not %s", ErrOtherRun, ref, a.Run, run)
		}
		old, ok := a.Parts[who]
		if ok && old.Step >= p.Step {
			return errUnchanged
		}
		if !ok && len(a.Parts) >= MaxParts {
			return fmt.Errorf("%w: %s counts %d", ErrFull, ref, len(a.Parts))
		}
		if a.Parts == nil {
			a.Parts = map[string]Part{}
		}
		a.Parts[who] = p
		a.Updated = s.now().UTC()
		return nil
	})
}

// errUnchanged: the change finds nothing to do.
var errUnchanged = errors.New("unchanged")

// update applies change to ref's account by compare-and-set, again on a
// conflict, and returns the account as written (or as found, when change
// left it alone).
func (s *Store) update(ctx context.Context, ref streams.SessionRef, change func(a *Account, found bool) error) (Account, error) {
	key := s.names.LedgerKey(ref)
	for attempt := 0; ; attempt++ {
		a, rev, err := s.get(ctx, ref)
		found := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Account{}, err
		}
		if err := change(&a, found); errors.Is(err, errUnchanged) {
			return a, nil
		} else if err != nil {
			return a, err
		}
		b, err := json.Marshal(a)
		if err != nil {
			return Account{}, fmt.Errorf("ledger: encode account of %s: %w", ref, err)
		}
		if found {
			_, err = s.kv.Update(ctx, key, b, rev)
		} else {
			_, err = s.kv.Create(ctx, key, b)
		}
		if err == nil {
			return a, nil
		}
		if !conflict(err) || attempt >= maxAttempts {
			return Account{}, fmt.Errorf("ledger: write account of %s: %w", ref, err)
		}
		// Another worker wrote first: read it again, after a short
		// jittered pause so writers of one hot account spread out.
		t := time.NewTimer(time.Duration(rand.N(int64(time.Millisecond) * int64(1+attempt))))
		select {
		case <-ctx.Done():
			t.Stop()
			return Account{}, ctx.Err()
		case <-t.C:
		}
	}
}

func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
