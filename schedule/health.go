package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// States of a schedule.
const (
	StateActive    = "active"
	StateSuspended = "suspended"
)

// Results of a tick.
const (
	ResultOK      = "ok"
	ResultFailed  = "failed"
	ResultTimeout = "timeout"
	ResultSkipped = "skipped"
	// ResultSuperseded: a newer tick of a cancel_previous schedule ended
	// the run, as the policy asks; not a failure.
	ResultSuperseded = "superseded"
)

// ErrNotFound reports a schedule jl_schedules has no record of.
var ErrNotFound = errors.New("schedule not found")

// casRetries bounds the compare-and-set loop of one health update.
const casRetries = 20

// Health is a schedule's record in jl_schedules: what the reconciler
// installed and what its ticks did.
type Health struct {
	Agent    string `json:"agent"`
	Schedule string `json:"schedule"`
	Pattern  string `json:"pattern"`
	Expr     string `json:"expr"`
	TimeZone string `json:"time_zone,omitempty"`
	Mode     string `json:"session_mode"`
	// State is active or suspended (the breaker tripped).
	State               string    `json:"state"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	MaxFailures         int       `json:"max_failures"`
	LastTickID          string    `json:"last_tick_id,omitempty"`
	LastSlot            time.Time `json:"last_slot,omitzero"`
	LastFire            time.Time `json:"last_fire,omitzero"`
	LastResult          string    `json:"last_result,omitempty"`
	LastError           string    `json:"last_error,omitempty"`
	SuspendedAt         time.Time `json:"suspended_at,omitzero"`
	// InstallError is why the reconciler could not install the schedule.
	InstallError string    `json:"install_error,omitempty"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// NextFire is when the schedule next fires after now, as its pattern
// says (an @every schedule counts from its last fire); zero when it does
// not fire: suspended, or not installed.
func (h Health) NextFire(now time.Time) time.Time {
	if h.State != StateActive || h.InstallError != "" {
		return time.Time{}
	}
	p, err := ParsePattern(h.Expr, h.TimeZone, "")
	if err != nil {
		return time.Time{}
	}
	next := p.Next(now)
	if strings.HasPrefix(h.Expr, "@every ") && !h.LastFire.IsZero() {
		if n := p.Next(h.LastFire); n.After(now) {
			next = n
		}
	}
	return next
}

// HealthStore reads and updates schedule health in jl_schedules. Every
// update is a compare-and-set, so reconcilers and workers can write at once.
type HealthStore struct {
	kv    jetstream.KeyValue
	names streams.Names
}

// NewHealthStore opens jl_schedules.
func NewHealthStore(ctx context.Context, js jetstream.JetStream, names streams.Names) (*HealthStore, error) {
	kv, err := js.KeyValue(ctx, names.BucketSchedules())
	if err != nil {
		return nil, fmt.Errorf("schedule: open bucket %s: %w", names.BucketSchedules(), err)
	}
	return &HealthStore{kv: kv, names: names}, nil
}

// Get returns the health of one schedule.
func (s *HealthStore) Get(ctx context.Context, agent, schedule string) (Health, error) {
	key, err := s.names.ScheduleKey(agent, schedule)
	if err != nil {
		return Health{}, err
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Health{}, fmt.Errorf("schedule: %s/%s: %w", agent, schedule, ErrNotFound)
	}
	if err != nil {
		return Health{}, fmt.Errorf("schedule: read %s/%s: %w", agent, schedule, err)
	}
	var h Health
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return Health{}, fmt.Errorf("schedule: decode %s/%s: %w", agent, schedule, err)
	}
	return h, nil
}

// List returns every schedule's health.
func (s *HealthStore) List(ctx context.Context) ([]Health, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedule: list %s: %w", s.names.BucketSchedules(), err)
	}
	var out []Health
	for key := range lister.Keys() {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("schedule: read %s: %w", key, err)
		}
		var h Health
		if err := json.Unmarshal(e.Value(), &h); err != nil {
			return nil, fmt.Errorf("schedule: decode %s: %w", key, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// Update applies f to a schedule's record (a zero record when it has none)
// and writes it with a compare-and-set, retrying on conflicts. f returning
// errSkip leaves the record as it is.
func (s *HealthStore) Update(ctx context.Context, agent, schedule string, f func(*Health) error) (Health, error) {
	key, err := s.names.ScheduleKey(agent, schedule)
	if err != nil {
		return Health{}, err
	}
	for range casRetries {
		var h Health
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			h = Health{Agent: agent, Schedule: schedule, State: StateActive}
		case err != nil:
			return Health{}, fmt.Errorf("schedule: read %s/%s: %w", agent, schedule, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &h); err != nil {
				return Health{}, fmt.Errorf("schedule: decode %s/%s: %w", agent, schedule, err)
			}
		}
		before, _ := json.Marshal(h)
		if err := f(&h); err != nil {
			if errors.Is(err, errSkip) {
				return h, nil
			}
			return h, err
		}
		after, _ := json.Marshal(h)
		if string(before) == string(after) && rev != 0 {
			return h, nil
		}
		h.UpdatedAt = time.Now().UTC()
		val, err := json.Marshal(h)
		if err != nil {
			return Health{}, fmt.Errorf("schedule: encode %s/%s: %w", agent, schedule, err)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, val)
		} else {
			_, err = s.kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return h, nil
		}
		if !isConflict(err) {
			return Health{}, fmt.Errorf("schedule: write %s/%s: %w", agent, schedule, err)
		}
	}
	return Health{}, fmt.Errorf("schedule: write %s/%s: still conflicting after %d attempts", agent, schedule, casRetries)
}

// errSkip makes Update write nothing.
var errSkip = errors.New("skip")

// RecordTick records the result of one tick, once per tick id, and trips
// the breaker when the consecutive failures reach the schedule's maximum.
// It returns the record as written and whether this result suspended the
// schedule.
func (s *HealthStore) RecordTick(ctx context.Context, agent, schedule, tickID string, slot time.Time, result string, tickErr error) (Health, bool, error) {
	tripped := false
	h, err := s.Update(ctx, agent, schedule, func(h *Health) error {
		tripped = false
		if h.LastTickID == tickID && tickID != "" && h.LastResult != "" {
			return errSkip // recorded already: a redelivery
		}
		h.LastTickID, h.LastSlot, h.LastFire, h.LastResult = tickID, slot, time.Now().UTC(), result
		h.LastError = ""
		if tickErr != nil {
			h.LastError = tickErr.Error()
		}
		switch result {
		case ResultOK:
			h.ConsecutiveFailures = 0
		case ResultFailed, ResultTimeout:
			h.ConsecutiveFailures++
			max := h.MaxFailures
			if max == 0 {
				max = DefaultMaxFailures
			}
			if h.State != StateSuspended && h.ConsecutiveFailures >= max {
				h.State = StateSuspended
				h.SuspendedAt = time.Now().UTC()
				tripped = true
			}
		}
		return nil
	})
	return h, tripped, err
}

// Resume closes the breaker of a suspended schedule: its failures are
// forgotten and the reconciler installs its schedule message again.
func (s *HealthStore) Resume(ctx context.Context, agent, schedule string) (Health, error) {
	if _, err := s.Get(ctx, agent, schedule); err != nil {
		return Health{}, err
	}
	return s.Update(ctx, agent, schedule, func(h *Health) error {
		h.State = StateActive
		h.ConsecutiveFailures = 0
		h.SuspendedAt = time.Time{}
		return nil
	})
}

// Suspend opens the breaker by hand.
func (s *HealthStore) Suspend(ctx context.Context, agent, schedule string) (Health, error) {
	if _, err := s.Get(ctx, agent, schedule); err != nil {
		return Health{}, err
	}
	return s.Update(ctx, agent, schedule, func(h *Health) error {
		if h.State != StateSuspended {
			h.State = StateSuspended
			h.SuspendedAt = time.Now().UTC()
		}
		return nil
	})
}

// Delete forgets a schedule's health.
func (s *HealthStore) Delete(ctx context.Context, agent, schedule string) error {
	key, err := s.names.ScheduleKey(agent, schedule)
	if err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("schedule: delete %s/%s: %w", agent, schedule, err)
	}
	return nil
}

// Watch reports every change of jl_schedules until ctx ends.
func (s *HealthStore) Watch(ctx context.Context) (jetstream.KeyWatcher, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("schedule: watch %s: %w", s.names.BucketSchedules(), err)
	}
	return w, nil
}

// isConflict reports a compare-and-set that lost to another writer.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}
