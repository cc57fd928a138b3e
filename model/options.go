package model

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"
)

// Defaults of the HTTP providers.
const (
	// DefaultTimeout bounds one HTTP attempt when the definition sets no
	// timeout.
	DefaultTimeout = 2 * time.Minute
	// DefaultMaxAttempts is how many times a call is tried in all.
	DefaultMaxAttempts = 4
	// DefaultBaseBackoff is the pause before the first retry; it doubles
	// with every further retry, with jitter.
	DefaultBaseBackoff = 500 * time.Millisecond
	// DefaultMaxBackoff caps the pause between two attempts.
	DefaultMaxBackoff = 30 * time.Second
	// DefaultMaxRetryAfter is the longest Retry-After the call waits out
	// itself; a longer one ends the call with the *Error carrying it, so
	// the caller can schedule the retry instead of holding a turn open.
	DefaultMaxRetryAfter = 60 * time.Second
	// DefaultMaxResponseBytes bounds a response body.
	DefaultMaxResponseBytes = 16 << 20
)

// userAgent names the client to providers.
const userAgent = "jetloop"

// maxErrorBodyBytes bounds what is read of an error response.
const maxErrorBodyBytes = 64 << 10

// Option configures a provider made by New, NewAnthropic or NewOpenAI.
type Option func(*options) error

type options struct {
	client           *http.Client
	getenv           func(string) string
	maxAttempts      int
	baseBackoff      time.Duration
	maxBackoff       time.Duration
	maxRetryAfter    time.Duration
	maxResponseBytes int64
	logger           *slog.Logger
	price            *Price
	metrics          *Metrics
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		client:           &http.Client{},
		getenv:           os.Getenv,
		maxAttempts:      DefaultMaxAttempts,
		baseBackoff:      DefaultBaseBackoff,
		maxBackoff:       DefaultMaxBackoff,
		maxRetryAfter:    DefaultMaxRetryAfter,
		maxResponseBytes: DefaultMaxResponseBytes,
		logger:           slog.Default(),
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithHTTPClient makes the provider send its requests through c. Its
// Timeout should be zero: the provider bounds each attempt itself.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("model: WithHTTPClient: nil client")
		}
		o.client = c
		return nil
	}
}

// WithGetenv makes the provider read its API key through getenv instead
// of os.Getenv.
func WithGetenv(getenv func(string) string) Option {
	return func(o *options) error {
		if getenv == nil {
			return errors.New("model: WithGetenv: nil function")
		}
		o.getenv = getenv
		return nil
	}
}

// WithMaxAttempts sets how many times a call is tried in all (1: never
// retried).
func WithMaxAttempts(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("model: WithMaxAttempts(%d): want at least 1", n)
		}
		o.maxAttempts = n
		return nil
	}
}

// WithBackoff sets the pause before the first retry and the cap of the
// pause, which doubles with every retry.
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) error {
		if base <= 0 || max < base {
			return fmt.Errorf("model: WithBackoff(%s, %s): want 0 < base <= max", base, max)
		}
		o.baseBackoff, o.maxBackoff = base, max
		return nil
	}
}

// WithMaxRetryAfter sets the longest Retry-After the provider waits out
// before trying again; a longer one ends the call at once.
func WithMaxRetryAfter(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("model: WithMaxRetryAfter(%s): negative", d)
		}
		o.maxRetryAfter = d
		return nil
	}
}

// WithMaxResponseBytes bounds a response body; a larger one fails the
// call with ErrBadResponse.
func WithMaxResponseBytes(n int64) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("model: WithMaxResponseBytes(%d): want at least 1", n)
		}
		o.maxResponseBytes = n
		return nil
	}
}

// WithLogger sets the logger retries are reported to.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("model: WithLogger: nil logger")
		}
		o.logger = l
		return nil
	}
}

// WithPrice prices the model's usage at p instead of the list price
// table, e.g. for a negotiated rate or a model the table does not know.
func WithPrice(p Price) Option {
	return func(o *options) error {
		if p.InputPerMTok < 0 || p.OutputPerMTok < 0 {
			return fmt.Errorf("model: WithPrice(%+v): negative price", p)
		}
		o.price = &p
		return nil
	}
}

// pricer prices usage for a model name: the override if one was given,
// else the list price table.
func (o options) cost(modelName string, u Usage) float64 {
	if o.price != nil {
		return o.price.Cost(u)
	}
	c, _ := Cost(modelName, u)
	return c
}
