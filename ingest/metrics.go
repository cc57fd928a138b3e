package ingest

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ingest's Prometheus metrics.
type Metrics struct {
	received        *prometheus.CounterVec
	refused         *prometheus.CounterVec
	duplicates      *prometheus.CounterVec
	decisions       *prometheus.CounterVec
	publishFailures prometheus.Counter
	roomRefused     *prometheus.CounterVec
	seconds         *prometheus.HistogramVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_received_total", Help: "Requests received, by receiver.",
		}, []string{"receiver"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_refused_total", Help: "Requests answered with an error, by receiver and HTTP status.",
		}, []string{"receiver", "status"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_duplicates_total", Help: "Deliveries of events handled before, by receiver.",
		}, []string{"receiver"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_decisions_total", Help: "Admission decisions (admitted, rejected, rate_limited, debounced, error), by agent.",
		}, []string{"agent", "decision"}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jetloop_ingest_publish_failures_total", Help: "Deliveries answered 503 because a publish to JetStream failed.",
		}),
		roomRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_room_refused_total", Help: "Events JL_IN had no room for, by what was out of room (stream, source or agent), agent (for agent) and source.",
		}, []string{"scope", "agent", "source"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jetloop_ingest_request_seconds", Help: "Time to answer a request, by receiver.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"receiver"}),
	}
}

// Register registers the metrics with reg; metrics registered already
// (a second ingest in one process) are shared.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	regs := []struct {
		c   prometheus.Collector
		set func(prometheus.Collector)
	}{
		{m.received, func(c prometheus.Collector) { m.received = c.(*prometheus.CounterVec) }},
		{m.refused, func(c prometheus.Collector) { m.refused = c.(*prometheus.CounterVec) }},
		{m.duplicates, func(c prometheus.Collector) { m.duplicates = c.(*prometheus.CounterVec) }},
		{m.decisions, func(c prometheus.Collector) { m.decisions = c.(*prometheus.CounterVec) }},
		{m.publishFailures, func(c prometheus.Collector) { m.publishFailures = c.(prometheus.Counter) }},
		{m.roomRefused, func(c prometheus.Collector) { m.roomRefused = c.(*prometheus.CounterVec) }},
		{m.seconds, func(c prometheus.Collector) { m.seconds = c.(*prometheus.HistogramVec) }},
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
