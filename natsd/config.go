package natsd

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// SyncAlways is the Sync value that makes JetStream fsync every write
// before acknowledging it.
const SyncAlways = "always"

// Config describes one embedded server. The zero value is not usable: Dir is
// required; every other field has a default.
type Config struct {
	// Dir is the JetStream store folder. The server holds a lock file in it
	// for as long as it runs.
	Dir string
	// Name is the server name, unique within a cluster. Default "jetloop".
	Name string
	// Host is the client listener's address. Default 127.0.0.1.
	Host string
	// Port is the client port; 0 picks a free one.
	Port int
	// Cluster, when its Name is set, joins the server to a cluster.
	Cluster ClusterConfig
	// Sync is JetStream's sync_interval: "always" (fsync before every
	// acknowledgement) or a duration such as "2m". Empty selects the
	// default: "always" for a single node, the server's own interval
	// (2 minutes) for a cluster member, which relies on replication.
	Sync string
	// MaxPayload caps one message's size in bytes; 0 keeps the server's
	// default of 1 MiB.
	MaxPayload int32
	// Logf, when set, receives the server's notices, warnings and errors.
	Logf func(level, msg string)
	// Debug turns on the server's debug logging (with Logf).
	Debug bool
	// Auth, when set, makes every client log in as one of its users,
	// with that user's subject permissions. Nil: no authentication.
	Auth *Auth
}

// ClusterConfig joins a server to a cluster of embedded or standalone
// servers.
type ClusterConfig struct {
	// Name is the cluster's name; empty runs a single node.
	Name string
	// Host is the route listener's address. Default 127.0.0.1.
	Host string
	// Port is the route port; 0 picks a free one.
	Port int
	// Routes are the other members' route URLs (nats-route://host:port).
	Routes []string
}

// Clustered reports whether the config joins a cluster.
func (c Config) Clustered() bool { return c.Cluster.Name != "" }

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = "jetloop"
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Cluster.Name != "" && c.Cluster.Host == "" {
		c.Cluster.Host = "127.0.0.1"
	}
	if c.Sync == "" && !c.Clustered() {
		c.Sync = SyncAlways
	}
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("natsd: config: Dir (the store folder) is required")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("natsd: config: port %d is out of range 0-65535", c.Port)
	}
	if c.Cluster.Port < 0 || c.Cluster.Port > 65535 {
		return fmt.Errorf("natsd: config: cluster port %d is out of range 0-65535", c.Cluster.Port)
	}
	if _, _, err := parseSync(c.Sync); err != nil {
		return err
	}
	if _, err := parseRoutes(c.Cluster.Routes); err != nil {
		return err
	}
	if len(c.Cluster.Routes) > 0 && c.Cluster.Name == "" {
		return errors.New("natsd: config: cluster routes need a cluster name")
	}
	if c.Auth != nil {
		if err := c.Auth.Validate(); err != nil {
			return err
		}
	}
	if c.Cluster.Name != "" && len(c.Cluster.Routes) == 0 {
		return fmt.Errorf("natsd: config: cluster %q needs routes to its members (a route to this node itself is fine)", c.Cluster.Name)
	}
	return nil
}

// parseSync turns a Sync value into the server's interval and always flag.
func parseSync(s string) (time.Duration, bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return 0, false, nil
	case SyncAlways:
		return 0, true, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, false, fmt.Errorf("natsd: config: sync %q is neither %q nor a positive duration such as 2m", s, SyncAlways)
	}
	return d, false, nil
}

func parseRoutes(routes []string) ([]*url.URL, error) {
	out := make([]*url.URL, 0, len(routes))
	for _, r := range routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("natsd: config: route %q is not a URL such as nats-route://127.0.0.1:6222", r)
		}
		out = append(out, u)
	}
	return out, nil
}
