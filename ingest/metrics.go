package ingest

import (
	"errors"
	"time"

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
	// The decision records the pipeline writes: admission's
	// (admission.RecordObserver), a duplicate's and a no_room
	// refusal's (writeRecords).
	auditRecords  *prometheus.CounterVec
	auditMessages *prometheus.CounterVec
	auditGroup    prometheus.Histogram
	auditWait     prometheus.Histogram
	auditFailed   *prometheus.CounterVec
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
		auditRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_audit_records_total", Help: "Decision records stored in JL_AUDIT, by agent (_: a record of no single agent).",
		}, []string{"agent"}),
		auditMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_audit_messages_total", Help: "JL_AUDIT messages of decision records stored (one record alone, or several written together), by agent.",
		}, []string{"agent"}),
		auditGroup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "jetloop_ingest_audit_message_records", Help: "Decision records one stored JL_AUDIT message holds.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		auditWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "jetloop_ingest_audit_record_wait_seconds", Help: "Time a decision record waited, from its write until the message holding it was stored (queued behind a write in flight included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		auditFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_ingest_audit_records_failed_total", Help: "Decision records whose message was not stored (their deliveries answered 503), by agent and reason (error: refused; timeout: not acknowledged while anyone waited, maybe stored later).",
		}, []string{"agent", "reason"}),
	}
}

// RecordsStored counts a message of records decision records stored
// (admission.RecordObserver).
func (m *Metrics) RecordsStored(agent string, records int) {
	m.auditRecords.WithLabelValues(agent).Add(float64(records))
	m.auditMessages.WithLabelValues(agent).Inc()
	m.auditGroup.Observe(float64(records))
}

// RecordsWaited observes that n decision records waited d for their
// message (admission.RecordObserver).
func (m *Metrics) RecordsWaited(n int, d time.Duration) {
	for range n {
		m.auditWait.Observe(d.Seconds())
	}
}

// RecordsFailed counts records decision records whose message was not
// stored (admission.RecordObserver).
func (m *Metrics) RecordsFailed(agent string, records int, timeout bool) {
	reason := "error"
	if timeout {
		reason = "timeout"
	}
	m.auditFailed.WithLabelValues(agent, reason).Add(float64(records))
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
		{m.auditRecords, func(c prometheus.Collector) { m.auditRecords = c.(*prometheus.CounterVec) }},
		{m.auditMessages, func(c prometheus.Collector) { m.auditMessages = c.(*prometheus.CounterVec) }},
		{m.auditGroup, func(c prometheus.Collector) { m.auditGroup = c.(prometheus.Histogram) }},
		{m.auditWait, func(c prometheus.Collector) { m.auditWait = c.(prometheus.Histogram) }},
		{m.auditFailed, func(c prometheus.Collector) { m.auditFailed = c.(*prometheus.CounterVec) }},
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
