package control_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/streams"
)

// TestChatBotUserOfTheExampleAuthFile runs a server with the README's
// examples/auth.conf and shows what its chatbot user may do: publish
// control messages for its agents, acknowledged on its own inbox prefix,
// and nothing else.
func TestChatBotUserOfTheExampleAuthFile(t *testing.T) {
	t.Setenv("JETLOOP_ADMIN_PASSWORD", "admin-pw")
	t.Setenv("JETLOOP_CHATBOT_PASSWORD", "bot-pw")
	auth, err := natsd.LoadAuth("../examples/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := natstest.RunServer(t, func(c *natsd.Config) { c.Auth = &auth })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()

	admin, err := nats.Connect(s.ClientURL(), nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Provision(ctx, ajs, streams.Options{}); err != nil {
		t.Fatal(err)
	}

	errs := make(chan error, 100)
	bot, err := nats.Connect(s.ClientURL(), nats.UserInfo("chatbot", "bot-pw"), nats.CustomInboxPrefix("_INBOX_chatbot"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	bjs, err := jetstream.New(bot)
	if err != nil {
		t.Fatal(err)
	}

	// Allowed: a control message for its agents, acknowledged by JetStream.
	demo, _ := streams.NewSessionRef("demo", "main")
	seq, err := control.Publish(ctx, bjs, names, demo, control.Message{Verb: control.Steer, Text: "focus on the tests", Source: "/chatbot"})
	if err != nil {
		t.Fatalf("chatbot's control message for demo/main: %v", err)
	}
	raw, err := ajs.Stream(ctx, names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := raw.GetMsg(ctx, seq)
	if err != nil {
		t.Fatalf("JL_CTL message %d: %v", seq, err)
	}
	got, err := control.Parse(&nats.Msg{Subject: stored.Subject, Header: stored.Header, Data: stored.Data})
	if err != nil || got.Verb != control.Steer || got.Text != "focus on the tests" {
		t.Fatalf("JL_CTL message %d: %+v, %v", seq, got, err)
	}
	pr, _ := streams.NewSessionRef("pr-reviewer", "octo/repo#12")
	if _, err := control.Publish(ctx, bjs, names, pr, control.Message{Verb: control.Cancel}); err != nil {
		t.Fatalf("chatbot's control message for %s: %v", pr, err)
	}

	// Refused: everything else. Each refusal comes back as an asynchronous
	// permissions violation naming the subject.
	refused := func(t *testing.T, what, subject string) {
		t.Helper()
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
				t.Errorf("%s: got %v, want a permissions violation naming %s", what, err, subject)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no permissions violation", what)
		}
	}
	other, _ := streams.NewSessionRef("deployer", "prod")
	for _, tt := range []struct{ name, subject string }{
		{name: "another agent's control subject", subject: names.Ctl(other)},
		{name: "an input subject of its agent", subject: names.In(demo)},
		{name: "the JetStream API", subject: "$JS.API.STREAM.DELETE." + names.StreamCtl()},
		{name: "a KV write", subject: streams.KVSubject(names.BucketSessions(), names.StateKey(demo))},
		{name: "the runtime API", subject: names.API("cancel")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := control.NewMsg(names, demo, control.Message{Verb: control.Cancel})
			if err != nil {
				t.Fatal(err)
			}
			m.Subject = tt.subject
			if err := bot.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			refused(t, "publish to "+tt.subject, tt.subject)
		})
	}
	t.Run("the JetStream API through the client", func(t *testing.T) {
		// The request itself only times out; the violation is what tells.
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := bjs.Stream(sctx, names.StreamCtl()); err == nil {
			t.Fatal("chatbot read JL_CTL's info")
		}
		refused(t, "stream info", "$JS.API.STREAM.INFO")
	})
	t.Run("other clients' inboxes", func(t *testing.T) {
		if _, err := bot.SubscribeSync("_INBOX.>"); err != nil {
			t.Fatal(err)
		}
		refused(t, "subscribe to _INBOX.>", "_INBOX.>")
	})
	t.Run("control messages of its own agents", func(t *testing.T) {
		if _, err := bot.SubscribeSync(names.CtlAll()); err != nil {
			t.Fatal(err)
		}
		refused(t, "subscribe to "+names.CtlAll(), names.CtlAll())
	})

	// Nothing refused reached a stream or bucket: the server handles a
	// client's messages in order, and every refusal has been reported.
	info, err := raw.Info(ctx, jetstream.WithSubjectFilter(names.CtlAll()))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Msgs; n != 2 {
		t.Errorf("JL_CTL holds %d messages, want the chatbot's 2: %v", n, info.State.Subjects)
	}
	if _, err := ajs.Stream(ctx, names.StreamCtl()); err != nil {
		t.Errorf("JL_CTL is gone: %v", err)
	}
	kv, err := ajs.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, names.StateKey(demo)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("chatbot's KV write: got %v, want no key", err)
	}
	in, err := ajs.Stream(ctx, names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	if n := in.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("JL_IN holds %d messages, want none", n)
	}
}
