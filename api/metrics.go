package api

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API's Prometheus metrics, over NATS and HTTP alike.
type Metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_api_requests_total", Help: "API requests answered, by endpoint, transport (nats, http) and code (200 or an error's HTTP status).",
		}, []string{"endpoint", "transport", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jetloop_api_request_seconds", Help: "Time to answer an API request, by endpoint.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"endpoint"}),
	}
}

// Register registers the metrics with reg; metrics registered already (a
// second service in one process) are shared.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	if err := reg.Register(m.requests); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
		m.requests = are.ExistingCollector.(*prometheus.CounterVec)
	}
	if err := reg.Register(m.seconds); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
		m.seconds = are.ExistingCollector.(*prometheus.HistogramVec)
	}
	return nil
}
