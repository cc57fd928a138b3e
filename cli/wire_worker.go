package cli

import "context"

// workerCommands are the client verbs of the session side (send, status,
// show, tail).
func workerCommands() []command { return nil }

// workerComponent returns one worker with identity id.
func workerComponent(ctx context.Context, rt *Runtime, id string) (Component, error) {
	return idle("worker " + id), nil
}
