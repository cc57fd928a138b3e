package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/jetloop/jetloop/api"
)

// command is one verb of the command line.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *Env, args []string) error
}

// Env is what a command runs with: its output streams and logger.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	Log    *slog.Logger
	// Getenv reads the environment; tests replace it.
	Getenv func(string) string
}

// errUsage marks a command line that could not be parsed; the message has
// been printed already.
var errUsage = errors.New("usage")

func commands() []command {
	cs := []command{
		{name: "dev", summary: "run an embedded NATS server and every component", run: runDev},
		{name: "ingest", summary: "run the HTTP ingest against a NATS server", run: runIngest},
		{name: "worker", summary: "run a worker against a NATS server", run: runWorker},
		{name: "cron", summary: "run the schedule reconciler against a NATS server", run: runCron},
		{name: "version", summary: "print the version", run: runVersion},
	}
	cs = append(cs, ingestCommands()...)
	cs = append(cs, workerCommands()...)
	cs = append(cs, controlCommands()...)
	cs = append(cs, benchCommands()...)
	cs = append(cs, dlqCommands()...)
	return append(cs, cronCommands()...)
}

// Version is set at build time with -ldflags "-X github.com/jetloop/jetloop/cli.Version=…".
var Version = "dev"

// Exit codes of Main besides 0 (success).
const (
	// ExitFailure: the command failed.
	ExitFailure = 1
	// ExitUsage: the command line could not be parsed.
	ExitUsage = 2
	// ExitNotFound: the API answered 404: no such agent, session or
	// schedule.
	ExitNotFound = 3
	// ExitConflict: the API answered 409: the request does not fit the
	// state of what it addresses (an approve of a call that is not
	// pending, a fork onto a session that exists).
	ExitConflict = 4
)

// exitError is a failure with its own exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// missing is a failure that exits ExitNotFound.
func missing(format string, args ...any) error {
	return &exitError{code: ExitNotFound, msg: fmt.Sprintf(format, args...)}
}

// exitCode is the exit code of a command that failed with err.
func exitCode(err error) int {
	var e *exitError
	switch {
	case errors.As(err, &e):
		return e.code
	case errors.Is(err, api.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, api.ErrConflict):
		return ExitConflict
	}
	return ExitFailure
}

// Main runs the command line args (without the program name) and returns
// the process exit code: 0 on success, 1 on failure, 2 on a usage error, 3
// when what the command addresses does not exist, 4 when it cannot take
// the request as it stands. Errors are one line on stderr naming what
// failed and why.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	format, args, err := logFormat(args, os.Getenv("JETLOOP_LOG_FORMAT"))
	if err != nil {
		fmt.Fprintf(stderr, "jetloop: %v\n", err)
		return ExitUsage
	}
	env := &Env{
		Stdout: stdout,
		Stderr: stderr,
		Log:    slog.New(NewLogHandler(stderr, format, logLevel())),
		Getenv: os.Getenv,
	}
	return MainEnv(ctx, env, args)
}

// Log formats of --log-format.
const (
	LogText = "text"
	LogJSON = "json"
)

// NewLogHandler is the handler of the process's logs on w: logfmt-style
// text, or one JSON object a line.
func NewLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogJSON {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// logFormat takes --log-format FORMAT (or --log-format=FORMAT) from
// anywhere on the command line, every verb taking it, and returns the
// format (def when absent, else text) and the rest of the arguments.
func logFormat(args []string, def string) (string, []string, error) {
	format := def
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "log-format" {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return "", nil, errors.New("--log-format needs a value: text or json")
			}
			i++
			value = args[i]
		}
		format = value
	}
	switch format {
	case "", LogText:
		return LogText, rest, nil
	case LogJSON:
		return LogJSON, rest, nil
	}
	return "", nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// MainEnv is Main with a given environment.
func MainEnv(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.Stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errUsage):
			return 2
		case errors.Is(err, flag.ErrHelp):
			return 0
		default:
			fmt.Fprintf(env.Stderr, "jetloop %s: %v\n", c.name, err)
			return exitCode(err)
		}
	}
	fmt.Fprintf(env.Stderr, "jetloop: unknown command %q\n\n", args[0])
	usage(env.Stderr)
	return 2
}

func usage(w io.Writer) {
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	var b strings.Builder
	b.WriteString("jetloop: a runtime for event-driven AI agents on NATS JetStream\n\nUsage: jetloop COMMAND [flags]\n\nCommands:\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'jetloop COMMAND -h' for a command's flags. Every command takes --log-format text|json\n(or JETLOOP_LOG_FORMAT) for its logs on stderr, and JETLOOP_LOG_LEVEL=debug shows more.\n")
	io.WriteString(w, b.String())
}

// newFlags returns a flag set for a command that prints its usage to env's
// stderr and returns errors instead of exiting.
func newFlags(env *Env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("jetloop "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "Usage: jetloop %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, mapping a parse failure to errUsage. Flags may come
// before, between or after the positional arguments (`jetloop show
// demo/s1 --json`); a "--" ends the flags.
func parse(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// A "--" that Parse consumed leaves the rest as positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return errUsage
	}
	return nil
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("JETLOOP_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

func runVersion(_ context.Context, env *Env, args []string) error {
	fs := newFlags(env, "version", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, "jetloop", Version)
	return nil
}
