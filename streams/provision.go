package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrIncompatible reports an existing stream whose config differs from the
// declared one in a field that cannot be updated in place.
var ErrIncompatible = errors.New("existing config cannot be updated in place")

// Action is what Provision did to one resource.
type Action string

// Actions of Provision.
const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
)

// Change records what Provision did to one resource.
type Change struct {
	Kind   Kind
	Name   string
	Action Action
	// Fields names the config fields an update changed.
	Fields []string
}

// String is a log line such as "stream JL_IN updated (duplicate_window)".
func (c Change) String() string {
	s := fmt.Sprintf("%s %s %s", c.Kind, c.Name, c.Action)
	if len(c.Fields) > 0 {
		s += " (" + strings.Join(c.Fields, ", ") + ")"
	}
	return s
}

// Report lists what Provision did, one Change per resource of Layout.
type Report []Change

// Changed reports whether Provision created or updated anything.
func (r Report) Changed() bool {
	for _, c := range r {
		if c.Action != Unchanged {
			return true
		}
	}
	return false
}

// Provision creates every resource of Layout(opts) that is missing and
// brings the fields jetloop depends on (subjects, retention, KV history,
// the allow_* features) of existing ones in step. Replicas, dedupe
// windows and ages are brought in step only when opts sets them, and
// descriptions only at creation, so an operator's tuning survives every
// process start. It is idempotent: a second run with the same options
// changes nothing and reports every resource Unchanged. Several processes
// may run it at once. An existing resource whose config cannot be changed
// in place (storage type, say) fails with ErrIncompatible naming the
// stream and the field.
func Provision(ctx context.Context, js jetstream.JetStream, opts Options) (Report, error) {
	var report Report
	for _, res := range Layout(opts) {
		ch, err := provisionOne(ctx, js, res, tuned(opts, res))
		if err != nil {
			return report, err
		}
		report = append(report, ch)
	}
	return report, nil
}

// tuned returns the fields of res that Provision leaves to the operator
// because opts does not set them.
func tuned(opts Options, res Resource) map[string]bool {
	skip := map[string]bool{"description": true}
	if opts.Replicas == 0 {
		skip["num_replicas"] = true
	}
	if opts.DedupeWindow == 0 {
		skip["duplicate_window"] = true
	}
	if _, one := opts.Limits[res.Name]; opts.StorageBudget == 0 && !one {
		// Not a managed field: existing limits stay (see limitFor).
		skip["limits"] = true
	}
	n := opts.Names
	switch {
	case res.Kind == KindStream && res.Name == n.StreamAudit() && opts.AuditMaxAge != 0:
	case res.Kind == KindKV && res.Name == n.BucketDedupe() && opts.DedupeTTL != 0:
	default:
		skip["max_age"] = true
	}
	return skip
}

func provisionOne(ctx context.Context, js jetstream.JetStream, res Resource, skip map[string]bool) (Change, error) {
	ch := Change{Kind: res.Kind, Name: res.Name, Action: Unchanged}
	s, err := js.Stream(ctx, res.StreamName())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		createErr := create(ctx, js, res)
		if createErr == nil {
			ch.Action = Created
		}
		// Another process may have created it meanwhile: look again, and
		// reconcile what is there either way.
		s, err = js.Stream(ctx, res.StreamName())
		if err != nil {
			if createErr != nil {
				err = createErr
			}
			return ch, fmt.Errorf("streams: create %s %s: %w", res.Kind, res.Name, roomHint(err, res.Stream.MaxBytes))
		}
	} else if err != nil {
		return ch, fmt.Errorf("streams: look up %s %s: %w", res.Kind, res.Name, err)
	}
	info := s.CachedInfo()
	have := info.Config
	if err := compatible(res, have); err != nil {
		return ch, err
	}
	explicit := !skip["limits"]
	res.Stream.MaxBytes = limitFor(res.Stream.MaxBytes, have.MaxBytes, int64(info.State.Bytes), explicit)
	res.Stream.MaxMsgs = limitFor(res.Stream.MaxMsgs, have.MaxMsgs, int64(info.State.Msgs), explicit)
	want, fields := reconcile(res, have, skip)
	if len(fields) == 0 {
		return ch, nil
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return ch, fmt.Errorf("streams: update %s %s (%s): %w", res.Kind, res.Name, strings.Join(fields, ", "), roomHint(err, want.MaxBytes))
	}
	if ch.Action != Created {
		ch.Action = Updated
		ch.Fields = fields
	}
	return ch, nil
}

// limitFor is the limit Provision sets: the declared one, or an existing
// limit when the caller set none explicitly (an operator's tuning stays),
// and never less than what the resource already holds and a quarter
// more, so a smaller budget cannot make a full stream refuse every write.
func limitFor(declared, have, used int64, explicit bool) int64 {
	v := declared
	if !explicit && have > 0 {
		v = have
	}
	if floor := used + used/4; v > 0 && v < floor {
		v = floor
	}
	return v
}

// Error codes of a server without room for a resource's max_bytes.
const (
	errCodeStorageExceeded = 10047
	errCodeMemoryExceeded  = 10028
)

// roomHint explains the server's refusal to reserve a resource's
// max_bytes.
func roomHint(err error, bytes int64) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeStorageExceeded || apiErr.ErrorCode == errCodeMemoryExceeded) {
		return fmt.Errorf("%w: the server cannot reserve max_bytes %d (%.1f GiB) for it; give JetStream more room (max_file_store) or provision with a smaller storage budget (--storage-budget, JETLOOP_STORAGE_BUDGET)",
			err, bytes, float64(bytes)/(1<<30))
	}
	return err
}

func create(ctx context.Context, js jetstream.JetStream, res Resource) error {
	var err error
	switch res.Kind {
	case KindKV:
		_, err = js.CreateKeyValue(ctx, *res.KV)
	case KindObject:
		_, err = js.CreateObjectStore(ctx, *res.Object)
	default:
		_, err = js.CreateStream(ctx, res.Stream)
	}
	return err
}

// compatible rejects differences the server cannot apply by an update.
func compatible(res Resource, have jetstream.StreamConfig) error {
	want := res.Stream
	bad := func(field string, have, want any) error {
		return fmt.Errorf("streams: %s %s (stream %s): field %s is %v, declared %v: %w; back up and remove it, or provision with matching options",
			res.Kind, res.Name, res.StreamName(), field, have, want, ErrIncompatible)
	}
	switch {
	case have.Storage != want.Storage:
		return bad("storage", have.Storage, want.Storage)
	case res.Kind == KindStream && have.Retention != want.Retention &&
		(have.Retention == jetstream.WorkQueuePolicy || want.Retention == jetstream.WorkQueuePolicy):
		return bad("retention", have.Retention, want.Retention)
	case have.Sealed:
		return bad("sealed", true, false)
	case have.Mirror != nil:
		return bad("mirror", have.Mirror.Name, "none")
	case have.AllowMsgCounter != want.AllowMsgCounter:
		return bad("allow_msg_counter", have.AllowMsgCounter, want.AllowMsgCounter)
	}
	return nil
}

// field is one stream setting that Provision manages.
type field struct {
	name string
	// streamOnly fields are managed on plain streams, not on the streams
	// behind buckets, whose shape the KV and object APIs own.
	streamOnly bool
	differs    func(have, want *jetstream.StreamConfig) bool
	set        func(have *jetstream.StreamConfig, want *jetstream.StreamConfig)
}

// raise is for settings the server can turn on but never off: a declared
// false leaves an existing true alone.
func raise(name string, streamOnly bool, get func(*jetstream.StreamConfig) *bool) field {
	return field{
		name: name, streamOnly: streamOnly,
		differs: func(h, w *jetstream.StreamConfig) bool { return *get(w) && !*get(h) },
		set:     func(h, w *jetstream.StreamConfig) { *get(h) = true },
	}
}

var managed = []field{
	{name: "subjects", streamOnly: true,
		differs: func(h, w *jetstream.StreamConfig) bool { return !slices.Equal(h.Subjects, w.Subjects) },
		set:     func(h, w *jetstream.StreamConfig) { h.Subjects = slices.Clone(w.Subjects) }},
	{name: "retention", streamOnly: true,
		differs: func(h, w *jetstream.StreamConfig) bool { return h.Retention != w.Retention },
		set:     func(h, w *jetstream.StreamConfig) { h.Retention = w.Retention }},
	{name: "description", streamOnly: true,
		differs: func(h, w *jetstream.StreamConfig) bool { return h.Description != w.Description },
		set:     func(h, w *jetstream.StreamConfig) { h.Description = w.Description }},
	{name: "duplicate_window", streamOnly: true,
		differs: func(h, w *jetstream.StreamConfig) bool { return w.Duplicates != 0 && h.Duplicates != w.Duplicates },
		set:     func(h, w *jetstream.StreamConfig) { h.Duplicates = w.Duplicates }},
	{name: "num_replicas",
		differs: func(h, w *jetstream.StreamConfig) bool { return h.Replicas != w.Replicas },
		set:     func(h, w *jetstream.StreamConfig) { h.Replicas = w.Replicas }},
	{name: "max_age",
		differs: func(h, w *jetstream.StreamConfig) bool { return h.MaxAge != w.MaxAge },
		set:     func(h, w *jetstream.StreamConfig) { h.MaxAge = w.MaxAge }},
	{name: "max_msgs_per_subject",
		differs: func(h, w *jetstream.StreamConfig) bool {
			return w.MaxMsgsPerSubject != 0 && h.MaxMsgsPerSubject != w.MaxMsgsPerSubject
		},
		set: func(h, w *jetstream.StreamConfig) { h.MaxMsgsPerSubject = w.MaxMsgsPerSubject }},
	{name: "discard",
		differs: func(h, w *jetstream.StreamConfig) bool { return h.Discard != w.Discard },
		set:     func(h, w *jetstream.StreamConfig) { h.Discard = w.Discard }},
	{name: "max_bytes",
		differs: func(h, w *jetstream.StreamConfig) bool { return w.MaxBytes != 0 && h.MaxBytes != w.MaxBytes },
		set:     func(h, w *jetstream.StreamConfig) { h.MaxBytes = w.MaxBytes }},
	{name: "max_msgs",
		differs: func(h, w *jetstream.StreamConfig) bool { return w.MaxMsgs != 0 && h.MaxMsgs != w.MaxMsgs },
		set:     func(h, w *jetstream.StreamConfig) { h.MaxMsgs = w.MaxMsgs }},
	{name: "subject_delete_marker_ttl",
		differs: func(h, w *jetstream.StreamConfig) bool {
			return w.SubjectDeleteMarkerTTL != 0 && h.SubjectDeleteMarkerTTL != w.SubjectDeleteMarkerTTL
		},
		set: func(h, w *jetstream.StreamConfig) { h.SubjectDeleteMarkerTTL = w.SubjectDeleteMarkerTTL }},
	raise("allow_msg_ttl", false, func(c *jetstream.StreamConfig) *bool { return &c.AllowMsgTTL }),
	raise("allow_msg_schedules", false, func(c *jetstream.StreamConfig) *bool { return &c.AllowMsgSchedules }),
	raise("allow_atomic", false, func(c *jetstream.StreamConfig) *bool { return &c.AllowAtomicPublish }),
	raise("allow_rollup_hdrs", true, func(c *jetstream.StreamConfig) *bool { return &c.AllowRollup }),
	raise("allow_direct", true, func(c *jetstream.StreamConfig) *bool { return &c.AllowDirect }),
}

// reconcile returns the existing config with every managed field that
// differs set as declared, and the names of those fields.
func reconcile(res Resource, have jetstream.StreamConfig, skip map[string]bool) (jetstream.StreamConfig, []string) {
	want := res.Stream
	out := have
	out.Subjects = slices.Clone(have.Subjects)
	var fields []string
	for _, f := range managed {
		if (f.streamOnly && res.Kind != KindStream) || skip[f.name] {
			continue
		}
		if f.differs(&out, &want) {
			f.set(&out, &want)
			fields = append(fields, f.name)
		}
	}
	return out, fields
}
