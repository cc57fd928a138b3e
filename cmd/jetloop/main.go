// Command jetloop is the all-in-one binary: `jetloop dev` runs an embedded NATS
// server with every component, and the client verbs talk to a running one.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jetloop/jetloop/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, a second one ends the process at once.
	context.AfterFunc(ctx, stop)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
