// Command chaosnode runs one embedded NATS server with JetStream as a
// member of the chaos harness's cluster, so that the harness can kill -9,
// stop and restart each node as a process of its own:
//
//	chaosnode -dir D -name n1 -port 4222 -cluster jl-chaos -cluster-port 6222 \
//	    -routes nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223,... [-sync always]
//
// It prints "chaosnode ready <client URL>" once it accepts clients, logs the
// server's warnings and errors to stderr, and shuts down cleanly on SIGTERM
// or SIGINT. It is built by the harness, not installed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/natsd"
)

func main() {
	var cfg natsd.Config
	var routes string
	flag.StringVar(&cfg.Dir, "dir", "", "JetStream store folder (required)")
	flag.StringVar(&cfg.Name, "name", "", "server name, unique in the cluster")
	flag.IntVar(&cfg.Port, "port", 0, "client port")
	flag.StringVar(&cfg.Cluster.Name, "cluster", "", "cluster name")
	flag.IntVar(&cfg.Cluster.Port, "cluster-port", 0, "route port")
	flag.StringVar(&routes, "routes", "", "comma-separated route URLs of every member")
	flag.StringVar(&cfg.Sync, "sync", "", `JetStream sync_interval: "always" or a duration; empty: the server's default`)
	flag.Parse()
	if routes != "" {
		cfg.Cluster.Routes = strings.Split(routes, ",")
	}
	cfg.Logf = func(level, msg string) {
		if level == "warn" || level == "error" {
			fmt.Fprintf(os.Stderr, "%s %s [%s] %s\n", time.Now().Format("15:04:05.000"), cfg.Name, level, msg)
		}
	}
	s, err := natsd.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
	fmt.Println("chaosnode ready", s.ClientURL())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
}
