package logtest_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/logtest"
)

type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestRepeatedKeysFail(t *testing.T) {
	tests := []struct {
		name string
		log  func(l *slog.Logger)
		want string
	}{
		{name: "clean", log: func(l *slog.Logger) { l.With("worker", "w1").Info("x", "turn", 1, "step", 2) }},
		{name: "bound twice", log: func(l *slog.Logger) { l.With("worker", "w1").With("worker", "w1").Info("x") }, want: "repeats worker"},
		{name: "bound and per line", log: func(l *slog.Logger) { l.With("turn", 0).Info("x", "turn", 1) }, want: "repeats turn"},
		{name: "groups apart", log: func(l *slog.Logger) { l.With("id", 1).WithGroup("g").Info("x", "id", 2) }},
		{name: "in a group twice", log: func(l *slog.Logger) { l.WithGroup("g").With("id", 1).Info("x", "id", 2) }, want: "repeats g.id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			tt.log(logtest.Logger(r, nil))
			switch {
			case tt.want == "" && len(r.errs) > 0:
				t.Errorf("reported %v", r.errs)
			case tt.want != "" && (len(r.errs) != 1 || !strings.Contains(r.errs[0], tt.want)):
				t.Errorf("reported %v, want %q", r.errs, tt.want)
			}
		})
	}
}
