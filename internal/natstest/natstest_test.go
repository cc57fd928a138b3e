package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
)

func TestRunServer(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("JetStream not ready: %v", err)
	}
	if !s.Server().JetStreamConfig().SyncAlways {
		t.Error("a single test node should fsync every write by default")
	}
}

func TestRunClusterElectsANewLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ctx := context.Background()
	c := natstest.RunCluster(t, 3)
	for i, n := range c.Nodes() {
		if n.Server().JetStreamConfig().SyncAlways {
			t.Errorf("cluster node %d fsyncs every write; a cluster relies on replication by default", i+1)
		}
	}
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	c.Stop(old)
	c.WaitReady()
	if l := c.Leader(); l < 0 || l == old {
		t.Fatalf("leader after stopping node %d: %d", old+1, l)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		_, err := js.Publish(ctx, "s", []byte("x"))
		return err
	})
	c.Restart(old)
	c.WaitReady()
}
