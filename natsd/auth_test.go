package natsd_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/natsd"
)

func TestAuthUsersAndPermissions(t *testing.T) {
	s := start(t, natsd.Config{Dir: t.TempDir(), Auth: &natsd.Auth{Users: []*server.User{
		{Username: "admin", Password: "a"},
		{Username: "bot", Password: "b", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"jl.ctl.demo.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_bot.>"}},
		}},
	}}})
	if nc, err := nats.Connect(s.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was admitted")
	}
	if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("bot", "wrong")); err == nil {
		nc.Close()
		t.Fatal("a client with a wrong password was admitted")
	}
	errs := make(chan error, 10)
	bot, err := nats.Connect(s.ClientURL(), nats.UserInfo("bot", "b"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	if err := bot.Publish("jl.ctl.other.s", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "jl.ctl.other.s") {
			t.Errorf("got %v, want a permissions violation naming jl.ctl.other.s", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no permissions violation for a publish outside the bot's subjects")
	}
}

func TestLoadAuth(t *testing.T) {
	t.Setenv("JETLOOP_ADMIN_PASSWORD", "s3cret")
	t.Setenv("JETLOOP_CHATBOT_PASSWORD", "b0t")
	a, err := natsd.LoadAuth("../examples/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Users) != 2 || a.Users[0].Username != "admin" || a.Users[0].Password != "s3cret" || a.Users[1].Permissions == nil {
		t.Fatalf("users of examples/auth.conf: %+v", a.Users)
	}
	tests := []struct {
		name, conf, want string
	}{
		{name: "no users", conf: `authorization { timeout: 2 }`, want: "no users"},
		{name: "token", conf: `authorization { token: abc }`, want: "token"},
		{name: "single user", conf: `authorization { user: a, password: b }`, want: "single user"},
		{name: "accounts", conf: `accounts { A { users: [{user: a, password: b}] } }`, want: "accounts"},
		{name: "duplicate user", conf: `authorization { users: [{user: a, password: b}, {user: a, password: c}] }`, want: `Duplicate user "a"`},
		{name: "syntax", conf: `authorization { users: [`, want: "auth file"},
		{name: "missing variable", conf: `authorization { users: [{user: a, password: $JETLOOP_NOT_SET_ANYWHERE}] }`, want: "JETLOOP_NOT_SET_ANYWHERE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "auth.conf")
			if err := os.WriteFile(path, []byte(tt.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := natsd.LoadAuth(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestAuthValidate(t *testing.T) {
	tests := []struct {
		name string
		auth natsd.Auth
		want string
	}{
		{name: "nobody", auth: natsd.Auth{}, want: "no users"},
		{name: "nameless", auth: natsd.Auth{Users: []*server.User{{Password: "x"}}}, want: "without a name"},
		{name: "twice", auth: natsd.Auth{Users: []*server.User{{Username: "a"}, {Username: "a"}}}, want: `"a" is given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := natsd.Start(natsd.Config{Dir: t.TempDir(), Auth: &tt.auth})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
