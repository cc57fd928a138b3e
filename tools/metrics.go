package tools

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a call, the outcome label of jetloop_tool_calls_total.
const (
	outcomeOK        = "ok"
	outcomeError     = "error"        // the tool reported an error to the model
	outcomeInvalid   = "invalid_args" // refused by the schema
	outcomeUnknown   = "unknown_tool" // tool label empty: names come from the model
	outcomeTimeout   = "timeout"
	outcomeCancelled = "cancelled"
	outcomePanic     = "panic"
	outcomeFailed    = "failed" // the call could not be made
)

type metrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	blobs   *prometheus.CounterVec
	probes  *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "tool", Name: "calls_total",
			Help: "Tool calls by tool and outcome.",
		}, []string{"tool", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jetloop", Subsystem: "tool", Name: "call_seconds",
			Help:    "Duration of tool calls that passed validation.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"tool"}),
		blobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "tool", Name: "result_blobs_total",
			Help: "Large tool results offloaded to the blob store, by outcome (stored, failed).",
		}, []string{"tool", "outcome"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "tool", Name: "probes_total",
			Help: "Probes of interrupted calls by tool and outcome (found, not_found, failed).",
		}, []string{"tool", "outcome"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []**prometheus.CounterVec{&m.calls, &m.blobs, &m.probes} {
		if err := adopt(reg, c); err != nil {
			return err
		}
	}
	return adopt(reg, &m.seconds)
}

// adopt registers *c with reg; one registered already (a second registry
// of tools in one process, as a test runs several) is shared.
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
