package model

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of model calls. Make one per
// registry and share it between all providers through WithMetrics.
type Metrics struct {
	calls    *prometheus.CounterVec
	attempts *prometheus.CounterVec
	duration *prometheus.HistogramVec
	tokens   *prometheus.CounterVec
	cost     *prometheus.CounterVec
}

// NewMetrics creates the model metrics and registers them with reg:
//
//	jetloop_model_calls_total{agent,provider,model,outcome}     calls by outcome
//	jetloop_model_attempts_total{provider,status}               HTTP attempts by status ("error": none)
//	jetloop_model_call_duration_seconds{agent,provider,model}   whole calls, retries included
//	jetloop_model_tokens_total{agent,provider,model,direction}  input and output tokens
//	jetloop_model_cost_usd_total{agent,provider,model}          list-price cost
//
// Outcomes are ok, rate_limited, server_error, timeout, bad_request,
// bad_response and cancelled. The agent is the one WithAgent named in
// the call's context (empty when none did); model the model that
// answered, or the one asked for when none did. Every label is bounded
// by what the definitions name, so a restart mints no new series.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_model_calls_total",
			Help: "Model calls by agent, provider, model and outcome.",
		}, []string{"agent", "provider", "model", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_model_attempts_total",
			Help: "HTTP attempts of model calls by provider and HTTP status; \"error\" when no response arrived.",
		}, []string{"provider", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jetloop_model_call_duration_seconds",
			Help:    "Duration of model calls, retries included, by agent, provider and model.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320},
		}, []string{"agent", "provider", "model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_model_tokens_total",
			Help: "Tokens of successful model calls by agent, provider, model and direction (input, output).",
		}, []string{"agent", "provider", "model", "direction"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetloop_model_cost_usd_total",
			Help: "Cost of successful model calls in US dollars, at list or configured prices, by agent, provider and model.",
		}, []string{"agent", "provider", "model"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.attempts, m.duration, m.tokens, m.cost} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("model metrics: %w", err)
		}
	}
	return m, nil
}

type agentKey struct{}

// WithAgent names the agent a model call is made for in its context, for
// the metrics' agent label.
func WithAgent(ctx context.Context, agent string) context.Context {
	return context.WithValue(ctx, agentKey{}, agent)
}

func agentOf(ctx context.Context) string {
	a, _ := ctx.Value(agentKey{}).(string)
	return a
}

// WithMetrics makes the provider report its calls to m.
func WithMetrics(m *Metrics) Option {
	return func(o *options) error {
		o.metrics = m
		return nil
	}
}

// observeCall records one finished call of model (the one asked for);
// m may be nil.
func (m *Metrics) observeCall(ctx context.Context, provider, model string, start time.Time, resp Response, err error) {
	if m == nil {
		return
	}
	agent := agentOf(ctx)
	if resp.Model != "" && err == nil {
		model = resp.Model
	}
	m.calls.WithLabelValues(agent, provider, model, outcome(err)).Inc()
	m.duration.WithLabelValues(agent, provider, model).Observe(time.Since(start).Seconds())
	if err != nil {
		return
	}
	m.tokens.WithLabelValues(agent, provider, model, "input").Add(float64(resp.Usage.InputTokens))
	m.tokens.WithLabelValues(agent, provider, model, "output").Add(float64(resp.Usage.OutputTokens))
	m.cost.WithLabelValues(agent, provider, model).Add(resp.Usage.CostUSD)
}

// observeAttempt records one HTTP attempt; status 0 is no response.
func (m *Metrics) observeAttempt(provider string, status int) {
	if m == nil {
		return
	}
	s := "error"
	if status != 0 {
		s = strconv.Itoa(status)
	}
	m.attempts.WithLabelValues(provider, s).Inc()
}

// outcome is the calls_total label of a call's error.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	case errors.Is(err, ErrRateLimited):
		return "rate_limited"
	case errors.Is(err, ErrServer):
		return "server_error"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrBadRequest):
		return "bad_request"
	default:
		return "bad_response"
	}
}
