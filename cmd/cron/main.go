// Command cron runs jetloop's cron component against a NATS server, for
// deployments that run components apart: cron --server URL.
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
	code := cli.Main(ctx, append([]string{"cron"}, os.Args[1:]...), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
