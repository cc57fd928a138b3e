package cli

import "context"

// ingestCommands are the client verbs of the ingest side (apply, agents,
// events, webhook).
func ingestCommands() []command { return nil }

// ingestComponents mounts the HTTP receivers on rt.Mux and returns the
// ingest's background parts.
func ingestComponents(ctx context.Context, rt *Runtime) ([]Component, error) {
	return nil, nil
}
