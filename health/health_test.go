package health_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jetloop/jetloop/health"
)

func TestHealthAndReadiness(t *testing.T) {
	var broken error
	c := &health.Checker{}
	c.Add("nats", func() error { return broken })

	tests := []struct {
		name        string
		broken      error
		ready       bool
		wantHealthz int
		wantReadyz  int
	}{
		{name: "starting", ready: false, wantHealthz: 200, wantReadyz: 503},
		{name: "running", ready: true, wantHealthz: 200, wantReadyz: 200},
		{name: "nats down", broken: errors.New("disconnected"), ready: true, wantHealthz: 503, wantReadyz: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broken = tt.broken
			c.SetReady(tt.ready)
			for path, want := range map[string]int{"/healthz": tt.wantHealthz, "/readyz": tt.wantReadyz} {
				h := c.Healthz()
				if path == "/readyz" {
					h = c.Readyz()
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != want {
					t.Errorf("%s = %d, want %d (%s)", path, rec.Code, want, rec.Body)
				}
			}
		})
	}
}
