package mcp

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connects       *prometheus.CounterVec
	connectSeconds *prometheus.HistogramVec
	open           prometheus.Gauge
	reconnects     *prometheus.CounterVec
	calls          *prometheus.CounterVec
	changes        *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "mcp", Name: "connects_total",
			Help: "Connects to MCP servers by server (its name in the definition) and outcome (ok, failed, cancelled).",
		}, []string{"server", "outcome"}),
		connectSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "jetloop", Subsystem: "mcp", Name: "connect_seconds",
			Help:    "Duration of connects to MCP servers, initialize and tools/list included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"server"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "jetloop", Subsystem: "mcp", Name: "connections",
			Help: "Open MCP connections held for sessions.",
		}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "mcp", Name: "reconnects_total",
			Help: "MCP connections found gone (server restarted or exited) and replaced, by server.",
		}, []string{"server"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "mcp", Name: "calls_total",
			Help: "MCP tool calls by server and outcome (ok, tool_error, error, withheld, unreachable, lost, cancelled).",
		}, []string{"server", "outcome"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jetloop", Subsystem: "mcp", Name: "catalog_changes_total",
			Help: "Admitted MCP tools found changed on their server (withheld unless the server is declared on_change: follow), by server and kind.",
		}, []string{"server", "kind"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []**prometheus.CounterVec{&m.connects, &m.reconnects, &m.calls, &m.changes} {
		if err := adopt(reg, c); err != nil {
			return err
		}
	}
	if err := adopt(reg, &m.connectSeconds); err != nil {
		return err
	}
	return adopt(reg, &m.open)
}

// adopt registers *c with reg; one registered already (a second pool in
// one process, as a test runs several) is shared.
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
