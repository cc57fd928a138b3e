package gate

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a gate's Prometheus metrics.
type Metrics struct {
	requests *prometheus.GaugeVec
	bytes    *prometheus.GaugeVec
	refused  *prometheus.CounterVec
	cut      *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetloop_gate_requests_in_flight", Help: "Requests holding a slot, by pool (verified, unverified).",
		}, []string{"pool"}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetloop_gate_bytes_in_flight", Help: "Declared body bytes held, by pool.",
		}, []string{"pool"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_gate_refused_total", Help: "Requests refused before their body was read, by pool and reason (busy, too_large).",
		}, []string{"pool", "reason"}),
		cut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_gate_cut_total", Help: "Requests cut while their body was read, by reason (too_slow, too_large).",
		}, []string{"reason"}),
	}
}

// Register registers the metrics with reg; metrics registered already
// (a second gate in one process) are shared.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	regs := []struct {
		c   prometheus.Collector
		set func(prometheus.Collector)
	}{
		{m.requests, func(c prometheus.Collector) { m.requests = c.(*prometheus.GaugeVec) }},
		{m.bytes, func(c prometheus.Collector) { m.bytes = c.(*prometheus.GaugeVec) }},
		{m.refused, func(c prometheus.Collector) { m.refused = c.(*prometheus.CounterVec) }},
		{m.cut, func(c prometheus.Collector) { m.cut = c.(*prometheus.CounterVec) }},
	}
	for _, r := range regs {
		if err := reg.Register(r.c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
			r.set(are.ExistingCollector)
		}
	}
	return nil
}
