package worker

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// versionWindow is how many of an agent's newest versions get a version
// label of their own; older ones share "older", so the label's values stay
// bounded however often an agent is applied.
const versionWindow = 8

// Metrics are the worker's Prometheus collectors. One Metrics may serve
// every worker of a process.
type Metrics struct {
	runs        *prometheus.CounterVec
	steps       *prometheus.CounterVec
	stepSeconds *prometheus.HistogramVec
	recoveries  *prometheus.CounterVec
	fenced      prometheus.Counter
	budgetStops *prometheus.CounterVec
	statuses    *prometheus.CounterVec
	active      prometheus.Gauge

	controls       *prometheus.CounterVec
	controlSeconds *prometheus.HistogramVec
	approvals      prometheus.Counter
	waitTimeouts   *prometheus.CounterVec
	reclaims       prometheus.Counter

	writeRetries *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	slots        *prometheus.CounterVec

	delegations   *prometheus.CounterVec
	ledgerReports *prometheus.CounterVec
	busy          *prometheus.CounterVec

	versionsMu sync.Mutex
	newest     map[string]uint64          // the newest version seen, by agent
	labelled   map[string]map[uint64]bool // versions with a label, by agent

	retained      prometheus.Counter
	trimmed       prometheus.Counter
	roomRefused   *prometheus.CounterVec
	compactions   prometheus.Counter
	contextTokens prometheus.Histogram
	maskedResults prometheus.Counter
}

// NewMetrics returns unregistered collectors; Register adds them to a
// registry.
func NewMetrics() *Metrics {
	return &Metrics{
		newest:   map[string]uint64{},
		labelled: map[string]map[uint64]bool{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "runs_total",
			Help: "Finished runs by agent, definition version (the newest 8 of each agent; \"older\" for the rest) and outcome (ok, tool_error, failed, budget_exceeded).",
		}, []string{"agent", "version", "outcome"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "steps_total",
			Help: "Settled steps by agent, definition version, kind (model, tool, compact) and outcome (ok, error, synthetic).",
		}, []string{"agent", "version", "kind", "outcome"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "step_seconds",
			Help:    "Time from a step's intent to its settlement, by agent, definition version and kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"agent", "version", "kind"}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "recoveries_total",
			Help: "Steps found with an intent and no settlement, by kind (model, tool, compact) and the action of the recovery table (adopt, remake, rerun, synthetic; a probe by its outcome: probe_found, probe_not_found, probe_failed, probe_later: held back by a rate limit, no attempt counted).",
		}, []string{"kind", "action"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "fenced_total",
			Help: "Sessions dropped because their state or lease moved on under this worker.",
		}),
		budgetStops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "budget_stops_total",
			Help: "Runs ended as budget_exceeded, by agent, definition version and the limit reached.",
		}, []string{"agent", "version", "limit"}),
		statuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "status_changes_total",
			Help: "Session status changes, by new status.",
		}, []string{"status"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "sessions_running",
			Help: "Sessions this process runs now (idle sessions are not held).",
		}),
		controls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "controls_total",
			Help: "Control messages applied, by verb and outcome (applied, ignored, refused, invalid).",
		}, []string{"verb", "outcome"}),
		controlSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "control_apply_seconds",
			Help:    "Time from a control message's arrival in JL_CTL to its application, by verb.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"verb"}),
		approvals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "approvals_requested_total",
			Help: "Tool calls an approval gate stopped before they ran.",
		}),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "sessions_reclaimed_total",
			Help: "Sessions taken back at start from a dead earlier incarnation of this worker, without waiting out their leases.",
		}),
		waitTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "wait_timeouts_total",
			Help: "Waits for a human that timed out, by on_timeout (deny, cancel, escalate) and outcome (applied, stale: the answer came first).",
		}, []string{"on_timeout", "outcome"}),
		writeRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "write_retries_total",
			Help: "State writes (intents and settlements) made again after a passing failure, by reason (batch_incomplete, batches_in_flight, unavailable, no_responders, timeout, reconnecting, fenced after an unknown outcome).",
		}, []string{"reason"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "dead_letters_total",
			Help: "Inputs sent to JL_DLQ, by result (ok; failed: the input stays unconsumed and comes back).",
		}, []string{"result"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "busy_inputs_total",
			Help: "Events that came while their session's run went on and acted on it, by their trigger's on_busy (reject, interrupt, steer).",
		}, []string{"on_busy"}),
		slots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "concurrency_slots_total",
			Help: "Requests of runs for a concurrency slot, by result (granted; queued: none free, the event waits in JL_IN).",
		}, []string{"result"}),
		retained: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "retention_removed_total",
			Help: "Sessions at rest removed by their agent's retention, with every record they had.",
		}),
		roomRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "room_refused_total",
			Help: "Writes of the runtime to JL_IN refused for want of room, by writer (wait-timer, delegation-deadline, tick-jitter, delegate-answer, ephemeral-tick).",
		}, []string{"writer"}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "events_trimmed_total",
			Help: "Consumed events of living sessions removed from JL_IN past their read_event horizon.",
		}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "compactions_total",
			Help: "Compaction steps settled: parts of a context replaced by a summary.",
		}),
		contextTokens: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "context_tokens",
			Help:    "Estimated input tokens of each model call's context.",
			Buckets: prometheus.ExponentialBuckets(256, 2, 12),
		}),
		maskedResults: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "masked_results_total",
			Help: "Tool results sent to a model call as a placeholder with a handle, summed over calls.",
		}),
		delegations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "delegations_total",
			Help: "Delegate calls by the delegating agent, its definition version and outcome (started, refused: by the hop limit, a cycle or reads; conflict: its event id was used for another event; answered; answered_late: after the run that made the call ended; cancelled: with the run that started it).",
		}, []string{"agent", "version", "outcome"}),
		ledgerReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "ledger_reports_total",
			Help: "Usage reports of delegated runs to their trees' accounts in jl_ledger, by result (ok; failed: the next report carries it).",
		}, []string{"result"}),
	}
}

// Register adds the collectors to reg; collectors already registered
// there are left as they are.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	// A collector registered already (a second worker in one process,
	// `jetloop dev --workers 2`) is shared: each worker counts into the
	// one the registry exports.
	var errs []error
	for _, c := range []**prometheus.CounterVec{&m.runs, &m.steps, &m.recoveries, &m.budgetStops, &m.statuses, &m.controls, &m.waitTimeouts,
		&m.writeRetries, &m.deadLetters, &m.slots, &m.busy, &m.delegations, &m.ledgerReports, &m.roomRefused} {
		errs = append(errs, adopt(reg, c))
	}
	for _, c := range []**prometheus.HistogramVec{&m.stepSeconds, &m.controlSeconds} {
		errs = append(errs, adopt(reg, c))
	}
	for _, c := range []*prometheus.Counter{&m.fenced, &m.approvals, &m.reclaims, &m.retained, &m.trimmed, &m.compactions, &m.maskedResults} {
		errs = append(errs, adopt(reg, c))
	}
	errs = append(errs, adopt(reg, &m.active), adopt(reg, &m.contextTokens))
	return errors.Join(errs...)
}

// adopt registers *c with reg, or makes *c the collector reg has already.
func adopt[T prometheus.Collector](reg prometheus.Registerer, c *T) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			*c = existing
			return nil
		}
	}
	return err
}

// version is the version label of an agent's version v: its number
// among the agent's newest versionWindow versions this process has seen,
// else "older". Series of versions that fall out of the window are
// removed, so each agent keeps at most versionWindow+1 values.
func (m *Metrics) version(agent string, v uint64) string {
	m.versionsMu.Lock()
	defer m.versionsMu.Unlock()
	return m.versionLocked(agent, v)
}

// counter is vec's series of agent's version v and rest, looked up while
// no version's series can be removed: a series made after its version's
// removal, from a label taken before it, would stay for good.
func (m *Metrics) counter(vec *prometheus.CounterVec, agent string, v uint64, rest ...string) prometheus.Counter {
	m.versionsMu.Lock()
	defer m.versionsMu.Unlock()
	return vec.WithLabelValues(append([]string{agent, m.versionLocked(agent, v)}, rest...)...)
}

// versionLocked is version with versionsMu held.
func (m *Metrics) versionLocked(agent string, v uint64) string {
	if v > m.newest[agent] {
		m.newest[agent] = v
		for old := range m.labelled[agent] {
			if old+versionWindow <= v {
				delete(m.labelled[agent], old)
				removals.Add(1)
				l := prometheus.Labels{"agent": agent, "version": strconv.FormatUint(old, 10)}
				m.runs.DeletePartialMatch(l)
				m.steps.DeletePartialMatch(l)
				m.stepSeconds.DeletePartialMatch(l)
				m.budgetStops.DeletePartialMatch(l)
				m.delegations.DeletePartialMatch(l)
			}
		}
	}
	if v+versionWindow <= m.newest[agent] {
		return "older"
	}
	if m.labelled[agent] == nil {
		m.labelled[agent] = map[uint64]bool{}
	}
	m.labelled[agent][v] = true
	return strconv.FormatUint(v, 10)
}

// removals counts the removals of a version's series by any Metrics of
// the process (workers may share collectors, see Register): a series
// looked up before one may have been taken out of its vector.
var removals atomic.Uint64

// stepSeries are the step metrics' series of a session's agent at one
// definition version, looked up once each and kept while no version's
// series is removed: a step counts without hashing its labels again.
type stepSeries struct {
	version uint64
	// label is the version's label, taken when the removals counted
	// epoch (empty until a series is made).
	epoch   uint64
	label   string
	seconds map[string]prometheus.Observer
	counts  map[[2]string]prometheus.Counter
}

// series returns the session's step series at its definition version.
func (s *session) series() *stepSeries {
	v, e := s.st.DefinitionVersion, removals.Load()
	c := s.stepSeries
	if c == nil || c.version != v || c.label != "" && c.epoch != e {
		c = &stepSeries{version: v, seconds: map[string]prometheus.Observer{}, counts: map[[2]string]prometheus.Counter{}}
		s.stepSeries = c
	}
	return c
}

// look makes a series of c with mk, under m's version lock (see
// counter), taking c's label again first if a version's series were
// removed since it was taken.
func (c *stepSeries) look(m *Metrics, agent string, mk func(label string)) {
	m.versionsMu.Lock()
	defer m.versionsMu.Unlock()
	if c.label == "" || c.epoch != removals.Load() {
		c.label = m.versionLocked(agent, c.version)
		c.epoch = removals.Load()
		clear(c.seconds)
		clear(c.counts)
	}
	mk(c.label)
}

// observeStep records how long a step of kind took from its intent
// (jetloop_worker_step_seconds).
func (s *session) observeStep(kind string, seconds float64) {
	c := s.series()
	o := c.seconds[kind]
	if o == nil {
		c.look(s.w.m, s.r.ref.Agent, func(label string) {
			o = s.w.m.stepSeconds.WithLabelValues(s.r.ref.Agent, label, kind)
			c.seconds[kind] = o
		})
	}
	o.Observe(seconds)
}

// countStep counts a settled step of kind by outcome
// (jetloop_worker_steps_total).
func (s *session) countStep(kind, outcome string) {
	c := s.series()
	k := [2]string{kind, outcome}
	n := c.counts[k]
	if n == nil {
		c.look(s.w.m, s.r.ref.Agent, func(label string) {
			n = s.w.m.steps.WithLabelValues(s.r.ref.Agent, label, kind, outcome)
			c.counts[k] = n
		})
	}
	n.Inc()
}
