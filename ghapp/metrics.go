package ghapp

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	exchanges   *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_github_token_exchanges_total",
			Help: "Installation token exchanges with GitHub, by outcome (ok, error, or the HTTP status).",
		}, []string{"outcome"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_github_rate_limited_total",
			Help: "GitHub requests held back by a rate limit: waited (then sent again) or failed (the reset was too far).",
		}, []string{"outcome"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.exchanges, m.rateLimited} {
		if err := r.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
