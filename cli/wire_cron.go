package cli

import "context"

// cronCommands are the client verbs of schedules.
func cronCommands() []command { return nil }

// cronComponent returns the schedule reconciler.
func cronComponent(ctx context.Context, rt *Runtime) (Component, error) {
	return idle("cron"), nil
}
