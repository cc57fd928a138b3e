package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/internal/ghfake"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// TestWorkerCrashProbe is the probe row of DESIGN §8's recovery table
// with a worker subprocess killed by kill -9 around a github_comment
// call: after the intent and before the POST, recovery's probe finds no
// comment with the call's marker and the call is made once; after the
// POST and before the settlement, the probe finds the comment and the
// call is settled with its real id. Either way GitHub holds exactly one
// comment for the call. The worker reaches GitHub as the agent's github:
// or the deployment's environment says: an App with its key in a file or
// in a variable, or a token.
func TestWorkerCrashProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	afterPost := crashPoint{Phase: worker.PhaseSettle, Kind: record.StepTool, Step: 2}
	// How the worker reaches GitHub: the agent's App key file, its key in
	// an environment variable, a token in one, or the deployment's App.
	keyFile := func(t *testing.T, f *ghfake.Server) *ghapp.Settings {
		return &ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: f.WriteKey(t, t.TempDir()), BaseURL: f.URL()}
	}
	tests := []struct {
		name string
		at   crashPoint
		auth func(*testing.T, *ghfake.Server) *ghapp.Settings
		// installation is the one whose token posts (0: a token).
		installation int64
	}{
		{name: "after intent", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepTool, Step: 2}, auth: keyFile, installation: 3},
		{name: "after the post", at: afterPost, auth: keyFile, installation: 3},
		{name: "key in the environment", at: afterPost, installation: 3, auth: func(t *testing.T, f *ghfake.Server) *ghapp.Settings {
			t.Setenv("CRASH_APP_KEY", string(f.PrivateKeyPEM()))
			return &ghapp.Settings{AppID: ghfake.AppID, PrivateKeyEnv: "CRASH_APP_KEY", BaseURL: f.URL()}
		}},
		{name: "token in the environment", at: afterPost, auth: func(t *testing.T, f *ghfake.Server) *ghapp.Settings {
			f.AddToken("ghp_crash")
			t.Setenv("CRASH_TOKEN", "ghp_crash")
			return &ghapp.Settings{TokenEnv: "CRASH_TOKEN", BaseURL: f.URL()}
		}},
		{name: "the deployment's App", at: afterPost, installation: 3, auth: func(t *testing.T, f *ghfake.Server) *ghapp.Settings {
			t.Setenv(ghapp.EnvAppID, fmt.Sprint(ghfake.AppID))
			t.Setenv(ghapp.EnvPrivateKeyFile, f.WriteKey(t, t.TempDir()))
			return &ghapp.Settings{BaseURL: f.URL()}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := ghfake.New(t)
			fake.AddInstallation(3, "octo/repo")
			e := newCrashEnv(t)
			def := policies.Definition{
				Name:   "crash",
				Tools:  []string{"github_comment"},
				GitHub: tt.auth(t, fake),
				Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
					{Text: "Commenting.", ToolCalls: []policies.ScriptToolCall{{Name: "github_comment",
						Args: map[string]any{"repo": "octo/repo", "number": 9, "body": "Looks good."}}}},
					{Text: "Commented."},
				}},
			}
			first := startChild(t, e.spec("w1", def, false, &tt.at))
			ref := e.send(t, "crash", "s1", "comment")
			first.waitPoint(t, time.Minute)
			first.kill()
			if tt.at.Phase == worker.PhaseSettle && len(fake.Comments("octo/repo", 9)) != 1 {
				t.Fatal("the first worker did not post before its crash point")
			}

			second := startChild(t, e.spec("w2", def, false, nil))
			tr := e.waitDone(t, ref, first, second)
			results := checkOneResult(t, tr)
			comments := fake.Comments("octo/repo", 9)
			if len(comments) != 1 || comments[0].Installation != tt.installation {
				t.Fatalf("%d comments, want 1 by installation %d: %+v", len(comments), tt.installation, comments)
			}
			for id, r := range results {
				if r.IsError || !strings.HasPrefix(r.Result, fmt.Sprintf("posted comment %d ", comments[0].ID)) {
					t.Errorf("result %q, want the comment %d", r.Result, comments[0].ID)
				}
				if want := tools.MarkerComment(tools.Call{Agent: "crash", Session: "s1", ID: id}); !strings.HasSuffix(comments[0].Body, want) {
					t.Errorf("body %q lacks %s", comments[0].Body, want)
				}
			}
			natstestPollAcked(t, e, "crash")
		})
	}
}
