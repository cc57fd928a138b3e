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
	// One registered already (another worker of the process) is shared.
	var errs []error
	for _, c := range []**prometheus.CounterVec{&m.exchanges, &m.rateLimited} {
		err := r.Register(*c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				*c, err = existing, nil
			}
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
