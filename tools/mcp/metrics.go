package mcp

import "github.com/prometheus/client_golang/prometheus"

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
			Help: "Admitted MCP tools found changed on their server (and withheld), by server and kind.",
		}, []string{"server", "kind"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.connects, m.connectSeconds, m.open, m.reconnects, m.calls, m.changes} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
