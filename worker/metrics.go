package worker

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the worker's Prometheus collectors. One Metrics may serve
// every worker of a process.
type Metrics struct {
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

	writeRetries *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
}

// NewMetrics returns unregistered collectors; Register adds them to a
// registry.
func NewMetrics() *Metrics {
	return &Metrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "steps_total",
			Help: "Settled steps by kind (model, tool) and outcome (ok, error, synthetic).",
		}, []string{"kind", "outcome"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "step_seconds",
			Help:    "Time from a step's intent to its settlement, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"kind"}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "recoveries_total",
			Help: "Steps found with an intent and no settlement, by kind and action (remade, rerun, synthetic).",
		}, []string{"kind", "action"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "fenced_total",
			Help: "Sessions dropped because their state or lease moved on under this worker.",
		}),
		budgetStops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "budget_stops_total",
			Help: "Runs ended as budget_exceeded, by the limit reached.",
		}, []string{"limit"}),
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
		writeRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "write_retries_total",
			Help: "State writes (intents and settlements) made again after a passing failure, by reason (batch_incomplete, batches_in_flight, unavailable, no_responders, timeout, reconnecting, fenced after an unknown outcome).",
		}, []string{"reason"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "worker", Name: "dead_letters_total",
			Help: "Inputs sent to JL_DLQ, by result (ok; failed: the input stays unconsumed and comes back).",
		}, []string{"result"}),
	}
}

// Register adds the collectors to reg; collectors already registered
// there are left as they are.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.steps, m.stepSeconds, m.recoveries, m.fenced, m.budgetStops, m.statuses, m.active, m.controls, m.controlSeconds, m.approvals, m.writeRetries, m.deadLetters} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
