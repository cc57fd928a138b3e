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
	// After the first signal, a second one ends the process at once.
	context.AfterFunc(ctx, stop)
	code := cli.Main(ctx, append([]string{"cron"}, os.Args[1:]...), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
