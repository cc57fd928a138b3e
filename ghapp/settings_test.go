package ghapp_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/ghapp"
)

func TestResolve(t *testing.T) {
	files := map[string]string{"/k.pem": "PEM", "/dep.pem": "DEPPEM"}
	readFile := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, os.ErrNotExist
	}
	for _, tc := range []struct {
		name    string
		s       ghapp.Settings
		env     map[string]string
		want    ghapp.Auth
		wantErr string
	}{
		{name: "nothing", wantErr: "JETLOOP_GITHUB_TOKEN"},
		{name: "agent app", s: ghapp.Settings{AppID: 5, PrivateKeyFile: "/k.pem"},
			env:  map[string]string{ghapp.EnvToken: "t"},
			want: ghapp.Auth{AppID: 5, PrivateKey: []byte("PEM"), BaseURL: ghapp.DefaultBaseURL, From: "github.private_key_file /k.pem"}},
		{name: "agent app key env", s: ghapp.Settings{AppID: 5, PrivateKeyEnv: "KEY"}, env: map[string]string{"KEY": "ENVPEM"},
			want: ghapp.Auth{AppID: 5, PrivateKey: []byte("ENVPEM"), BaseURL: ghapp.DefaultBaseURL, From: "github.private_key_env KEY"}},
		{name: "agent key env unset", s: ghapp.Settings{AppID: 5, PrivateKeyEnv: "KEY"}, wantErr: "github.private_key_env: environment variable KEY is not set"},
		{name: "agent key file missing", s: ghapp.Settings{AppID: 5, PrivateKeyFile: "/none.pem"}, wantErr: "github.private_key_file"},
		{name: "agent token", s: ghapp.Settings{TokenEnv: "TOK", BaseURL: "https://ghe.example.com/api/v3"}, env: map[string]string{"TOK": "x"},
			want: ghapp.Auth{Token: "x", BaseURL: "https://ghe.example.com/api/v3/", From: "github.token_env TOK"}},
		{name: "agent token unset", s: ghapp.Settings{TokenEnv: "TOK"}, wantErr: "github.token_env: environment variable TOK is not set"},
		{name: "deployment app over token", s: ghapp.Settings{BaseURL: "http://127.0.0.1:1/"},
			env:  map[string]string{ghapp.EnvAppID: "9", ghapp.EnvPrivateKeyFile: "/dep.pem", ghapp.EnvToken: "t"},
			want: ghapp.Auth{AppID: 9, PrivateKey: []byte("DEPPEM"), BaseURL: "http://127.0.0.1:1/", From: "JETLOOP_GITHUB_PRIVATE_KEY_FILE /dep.pem"}},
		{name: "deployment app without key", env: map[string]string{ghapp.EnvAppID: "9"}, wantErr: "JETLOOP_GITHUB_PRIVATE_KEY_FILE is not"},
		{name: "deployment app id bad", env: map[string]string{ghapp.EnvAppID: "nine"}, wantErr: "JETLOOP_GITHUB_APP_ID=\"nine\""},
		{name: "deployment token", env: map[string]string{ghapp.EnvToken: "t"},
			want: ghapp.Auth{Token: "t", BaseURL: ghapp.DefaultBaseURL, From: ghapp.EnvToken}},
		{name: "app without key", s: ghapp.Settings{AppID: 5}, wantErr: "app_id without a private key"},
		{name: "key without app", s: ghapp.Settings{PrivateKeyFile: "/k.pem"}, wantErr: "without app_id"},
		{name: "both keys", s: ghapp.Settings{AppID: 5, PrivateKeyFile: "/k.pem", PrivateKeyEnv: "K"}, wantErr: "set one"},
		{name: "token and app", s: ghapp.Settings{AppID: 5, PrivateKeyFile: "/k.pem", TokenEnv: "T"}, wantErr: "token_env and app_id"},
		{name: "bad env name", s: ghapp.Settings{TokenEnv: "1X"}, wantErr: "not an environment variable name"},
		{name: "bad base url", s: ghapp.Settings{BaseURL: "ftp://x"}, wantErr: "base_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ghapp.Resolve(tc.s, func(k string) string { return tc.env[k] }, readFile)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				if tc.name == "nothing" && !errors.Is(err, ghapp.ErrNoCredentials) {
					t.Fatalf("err %v does not wrap ErrNoCredentials", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.AppID != tc.want.AppID || string(got.PrivateKey) != string(tc.want.PrivateKey) || got.Token != tc.want.Token ||
				got.BaseURL != tc.want.BaseURL || got.From != tc.want.From {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
