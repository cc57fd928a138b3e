// Command ingest runs jetloop's ingest component against a NATS server, for
// deployments that run components apart: ingest --server URL.
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
	code := cli.Main(ctx, append([]string{"ingest"}, os.Args[1:]...), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
