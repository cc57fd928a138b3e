package ghapp

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Environment variables of the deployment's defaults.
const (
	EnvAppID          = "JETLOOP_GITHUB_APP_ID"
	EnvPrivateKeyFile = "JETLOOP_GITHUB_PRIVATE_KEY_FILE"
	EnvToken          = "JETLOOP_GITHUB_TOKEN"
)

// DefaultBaseURL is the public GitHub REST API.
const DefaultBaseURL = "https://api.github.com/"

// Settings say how an agent reaches GitHub: an App (AppID with a private
// key from a file or an environment variable) or a token from an
// environment variable, and the API's base URL. They are the github:
// field of an agent definition; the zero value uses the deployment's
// defaults.
type Settings struct {
	// AppID is the GitHub App's id.
	AppID int64 `yaml:"app_id,omitempty" json:"app_id,omitempty"`
	// PrivateKeyFile is the App's private key (PEM).
	PrivateKeyFile string `yaml:"private_key_file,omitempty" json:"private_key_file,omitempty"`
	// PrivateKeyEnv names an environment variable holding the PEM key.
	PrivateKeyEnv string `yaml:"private_key_env,omitempty" json:"private_key_env,omitempty"`
	// TokenEnv names an environment variable holding a token (a
	// fine-grained personal access token, say) used instead of an App.
	TokenEnv string `yaml:"token_env,omitempty" json:"token_env,omitempty"`
	// BaseURL is the REST API's root, for GitHub Enterprise Server
	// (https://ghe.example.com/api/v3/); default DefaultBaseURL.
	BaseURL string `yaml:"base_url,omitempty" json:"base_url,omitempty"`
}

// IsZero reports whether s sets nothing.
func (s Settings) IsZero() bool { return s == Settings{} }

// Validate reports settings that contradict each other or cannot work,
// each naming its field.
func (s Settings) Validate() error {
	var errs []error
	if s.AppID < 0 {
		errs = append(errs, fmt.Errorf("app_id %d is negative", s.AppID))
	}
	if s.PrivateKeyFile != "" && s.PrivateKeyEnv != "" {
		errs = append(errs, errors.New("private_key_file and private_key_env: set one"))
	}
	if (s.PrivateKeyFile != "" || s.PrivateKeyEnv != "") && s.AppID == 0 {
		errs = append(errs, errors.New("a private key without app_id: set app_id too"))
	}
	if s.AppID != 0 && s.PrivateKeyFile == "" && s.PrivateKeyEnv == "" {
		errs = append(errs, errors.New("app_id without a private key: set private_key_file or private_key_env"))
	}
	if s.TokenEnv != "" && s.AppID != 0 {
		errs = append(errs, errors.New("token_env and app_id: set one"))
	}
	for _, v := range []struct{ field, name string }{{"private_key_env", s.PrivateKeyEnv}, {"token_env", s.TokenEnv}} {
		if v.name != "" && !envName(v.name) {
			errs = append(errs, fmt.Errorf("%s %q is not an environment variable name", v.field, v.name))
		}
	}
	if s.BaseURL != "" {
		if _, err := parseBaseURL(s.BaseURL); err != nil {
			errs = append(errs, fmt.Errorf("base_url: %w", err))
		}
	}
	return errors.Join(errs...)
}

func envName(s string) bool {
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// parseBaseURL checks an API root and gives it its trailing slash.
func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%q: want an http(s) URL such as https://ghe.example.com/api/v3/", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%q: want no user, query or fragment", s)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// Auth is how one request authenticates: resolved Settings.
type Auth struct {
	// AppID and PrivateKey (PEM) for an App; Token otherwise.
	AppID      int64
	PrivateKey []byte
	Token      string
	// BaseURL ends in '/'.
	BaseURL string
	// From says where the credentials came from, for errors and logs (never
	// the secret itself): "github.private_key_file /etc/app.pem", say.
	From string
}

// ErrNoCredentials reports that neither the agent nor the deployment says
// how to reach GitHub.
var ErrNoCredentials = errors.New("no GitHub credentials")

// Resolve decides the credentials of s over the deployment's defaults
// read with getenv: the agent's App or token when it names one, else
// JETLOOP_GITHUB_APP_ID with JETLOOP_GITHUB_PRIVATE_KEY_FILE, else
// JETLOOP_GITHUB_TOKEN. readFile reads a private key file. The error names
// the setting that is missing or unreadable; it wraps ErrNoCredentials
// when nothing is set.
func Resolve(s Settings, getenv func(string) string, readFile func(string) ([]byte, error)) (Auth, error) {
	if err := s.Validate(); err != nil {
		return Auth{}, fmt.Errorf("github: %w", err)
	}
	a := Auth{BaseURL: DefaultBaseURL}
	if s.BaseURL != "" {
		u, _ := parseBaseURL(s.BaseURL)
		a.BaseURL = u.String()
	}
	switch {
	case s.TokenEnv != "":
		a.Token = getenv(s.TokenEnv)
		a.From = "github.token_env " + s.TokenEnv
		if a.Token == "" {
			return Auth{}, fmt.Errorf("github.token_env: environment variable %s is not set", s.TokenEnv)
		}
		return a, nil
	case s.AppID != 0:
		a.AppID = s.AppID
		key, from, err := privateKey(s, getenv, readFile)
		if err != nil {
			return Auth{}, err
		}
		a.PrivateKey, a.From = key, from
		return a, nil
	}
	if v := getenv(EnvAppID); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return Auth{}, fmt.Errorf("%s=%q: want the App's numeric id", EnvAppID, v)
		}
		path := getenv(EnvPrivateKeyFile)
		if path == "" {
			return Auth{}, fmt.Errorf("%s is set but %s is not: the App needs its private key", EnvAppID, EnvPrivateKeyFile)
		}
		key, err := readFile(path)
		if err != nil {
			return Auth{}, fmt.Errorf("%s: %w", EnvPrivateKeyFile, err)
		}
		a.AppID, a.PrivateKey, a.From = id, key, EnvPrivateKeyFile+" "+path
		return a, nil
	}
	if t := getenv(EnvToken); t != "" {
		a.Token, a.From = t, EnvToken
		return a, nil
	}
	return Auth{}, fmt.Errorf("%w: set github.app_id with github.private_key_file (or private_key_env), or github.token_env, in the agent definition; or %s with %s, or %s, in the worker's environment",
		ErrNoCredentials, EnvAppID, EnvPrivateKeyFile, EnvToken)
}

func privateKey(s Settings, getenv func(string) string, readFile func(string) ([]byte, error)) ([]byte, string, error) {
	if s.PrivateKeyEnv != "" {
		v := getenv(s.PrivateKeyEnv)
		if v == "" {
			return nil, "", fmt.Errorf("github.private_key_env: environment variable %s is not set", s.PrivateKeyEnv)
		}
		return []byte(v), "github.private_key_env " + s.PrivateKeyEnv, nil
	}
	b, err := readFile(s.PrivateKeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("github.private_key_file: %w", err)
	}
	return b, "github.private_key_file " + s.PrivateKeyFile, nil
}
