package health

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// Check reports nil when the thing it watches is healthy.
type Check func() error

// Checker holds a process's named checks and its readiness. The zero value
// is usable: no checks, not ready.
type Checker struct {
	mu     sync.RWMutex
	checks map[string]Check
	ready  atomic.Bool
}

// Add registers a named check, replacing one of the same name.
func (c *Checker) Add(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checks == nil {
		c.checks = map[string]Check{}
	}
	c.checks[name] = check
}

// SetReady marks the process ready (true) or draining (false).
func (c *Checker) SetReady(ready bool) { c.ready.Store(ready) }

// Status runs every check and returns the failures by name.
func (c *Checker) Status() map[string]string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	failed := map[string]string{}
	for name, check := range c.checks {
		if err := check(); err != nil {
			failed[name] = err.Error()
		}
	}
	return failed
}

// Healthz serves GET /healthz.
func (c *Checker) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failed := c.Status()
		write(w, len(failed) == 0, failed)
	})
}

// Readyz serves GET /readyz: healthy and ready.
func (c *Checker) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failed := c.Status()
		if !c.ready.Load() {
			failed["ready"] = "starting or shutting down"
		}
		write(w, len(failed) == 0, failed)
	})
}

func write(w http.ResponseWriter, ok bool, failed map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	body := struct {
		Status string            `json:"status"`
		Failed map[string]string `json:"failed,omitempty"`
	}{Status: "ok", Failed: failed}
	if !ok {
		body.Status = "unavailable"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Names lists the registered checks, sorted.
func (c *Checker) Names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	names := make([]string, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrNotConnected reports a NATS connection that is not connected.
var ErrNotConnected = errors.New("nats connection is not connected")

// NATS is a check that passes while nc is connected.
func NATS(nc *nats.Conn) Check {
	return func() error {
		if !nc.IsConnected() {
			return ErrNotConnected
		}
		return nil
	}
}
