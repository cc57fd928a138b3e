package natstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/natsd"
)

// Cluster is a set of embedded servers routed into one JetStream cluster.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	cfgs  []natsd.Config
	nodes []*natsd.Server // nil for a stopped node
}

// RunCluster starts n servers on random loopback ports, routed into one
// cluster, and returns once JetStream has a meta leader that every node
// follows. The cluster is stopped when the test ends.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: a cluster needs at least one node, got %d", n)
	}
	c := &Cluster{t: t, cfgs: make([]natsd.Config, n), nodes: make([]*natsd.Server, n)}
	// The stores are made before the cleanup that stops the servers is
	// registered: cleanups run last first, so the servers stop before
	// their folders are removed.
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	t.Cleanup(c.shutdownAll)
	name := "jl-" + strings.ToLower(strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	// JetStream clustering needs every member's routes at start, so the
	// route ports are chosen first. Each node routes to all, itself included
	// (the server ignores a route to itself). Another process may bind a
	// chosen port before its node does; the whole cluster is then started
	// again on other ports, on emptied stores.
	for attempt := 1; ; attempt++ {
		err := c.start(name, dirs, opts)
		if err == nil {
			break
		}
		if attempt >= startAttempts || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("natstest: %v", err)
		}
		t.Logf("natstest: %v; starting the cluster again on other ports (attempt %d of %d)", err, attempt+1, startAttempts)
		for i := range n {
			c.Stop(i)
		}
		for _, dir := range dirs {
			if err := emptyDir(dir); err != nil {
				t.Fatalf("natstest: empty %s for another start: %v", dir, err)
			}
		}
	}
	c.WaitReady()
	return c
}

// startAttempts bounds the starts of a cluster whose chosen route or
// client port another process took first.
const startAttempts = 5

// start starts every node of the cluster on fresh route and client
// ports, in dirs.
func (c *Cluster) start(name string, dirs []string, opts []Option) error {
	// The route and client ports are chosen at once, so no two are the
	// same, outside the ephemeral range, and kept: a node restarted on its
	// ports must find them free though its clients kept dialling while it
	// was down.
	all := pickPorts(c.t, 2*len(dirs))
	ports, clients := all[:len(dirs)], all[len(dirs):]
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	for i := range dirs {
		cfg := natsd.Config{
			Dir:     dirs[i],
			Name:    fmt.Sprintf("n%d", i+1),
			Port:    clients[i],
			Cluster: natsd.ClusterConfig{Name: name, Port: ports[i], Routes: routes},
		}
		for _, o := range opts {
			o(&cfg)
		}
		s, err := natsd.Start(cfg)
		if err != nil {
			return fmt.Errorf("start cluster node %d: %w", i+1, err)
		}
		// The client port the node listens on, kept for a restart.
		cfg.Port = s.Server().Addr().(*net.TCPAddr).Port
		c.mu.Lock()
		c.cfgs[i], c.nodes[i] = cfg, s
		c.mu.Unlock()
	}
	return nil
}

// pickPorts chooses a cluster's ports, n route ports and then n client
// ports (FreePorts; a test may choose taken ones).
var pickPorts = FreePorts

// emptyDir removes everything in dir, leaving dir itself.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Nodes returns the running servers; a stopped node's slot is nil.
func (c *Cluster) Nodes() []*natsd.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*natsd.Server(nil), c.nodes...)
}

// URLs is a comma-separated list of the running nodes' client URLs, as
// nats.Connect takes it.
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Nodes() {
		if s != nil {
			urls = append(urls, s.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}

// Leader returns the index of the node that is JetStream meta leader, or -1.
func (c *Cluster) Leader() int {
	for i, s := range c.Nodes() {
		if s != nil && s.Server().JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// WaitReady waits until a meta leader exists, every running node is
// current with it, and the leader can place assets on every running node:
// it has their JetStream statistics. (Before those arrive, a replicated
// stream created at once is refused: "no suitable peers for placement".)
func (c *Cluster) WaitReady() {
	c.t.Helper()
	WaitFor(c.t, readyTimeout, func() error {
		l := c.Leader()
		if l < 0 {
			return errors.New("no JetStream meta leader yet")
		}
		nodes := c.Nodes()
		running := 0
		for i, s := range nodes {
			if s == nil {
				continue
			}
			running++
			if !s.JetStreamReady() {
				return fmt.Errorf("node %d is not current with the meta leader", i+1)
			}
		}
		if peers := nodes[l].Server().JetStreamClusterPeers(); len(peers) < running {
			return fmt.Errorf("the meta leader can place on %d of the %d running nodes (%v)", len(peers), running, peers)
		}
		return nil
	})
}

// Stop shuts node i down, as a crash of that node would look to clients.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		shutdown(c.t, s)
	}
}

// Restart starts a stopped node i again on its store and ports.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	s, err := natsd.Start(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("natstest: restart node %d: %v", i+1, err)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
}

// Connect opens a client connection to every running node.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(c.URLs(), opts...)
}

func (c *Cluster) shutdownAll() {
	var wg sync.WaitGroup
	for i := range c.Nodes() {
		wg.Go(func() { c.Stop(i) })
	}
	wg.Wait()
}
