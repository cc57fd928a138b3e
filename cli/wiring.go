package cli

import (
	"context"
)

// ingestComponents mounts the HTTP receivers on rt.Mux and returns the
// ingest's background parts.
func ingestComponents(ctx context.Context, rt *Runtime) ([]Component, error) {
	return nil, nil
}

// workerComponent returns one worker with identity id.
func workerComponent(ctx context.Context, rt *Runtime, id string) (Component, error) {
	return idle("worker " + id), nil
}

// cronComponent returns the schedule reconciler.
func cronComponent(ctx context.Context, rt *Runtime) (Component, error) {
	return idle("cron"), nil
}
