package natsd

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats-server/v2/server"
)

// Auth is who may connect to a server and what each may publish and
// subscribe to. With Auth set, a client that presents no credentials, or
// wrong ones, is refused.
type Auth struct {
	// Users log in with a user name and a password (plain, or a bcrypt
	// hash starting with "$2a$"). A user without Permissions may do
	// anything.
	Users []*server.User
	// Nkeys log in by signing the server's nonce with their key.
	Nkeys []*server.NkeyUser
}

// Validate reports an Auth that admits nobody or names a user twice.
func (a Auth) Validate() error {
	if len(a.Users)+len(a.Nkeys) == 0 {
		return errors.New("natsd: auth: no users: a server with auth but no users admits nobody")
	}
	var seen []string
	for _, u := range a.Users {
		if u == nil || u.Username == "" {
			return errors.New("natsd: auth: a user without a name")
		}
		if slices.Contains(seen, u.Username) {
			return fmt.Errorf("natsd: auth: user %q is given twice", u.Username)
		}
		seen = append(seen, u.Username)
	}
	for _, u := range a.Nkeys {
		if u == nil || u.Nkey == "" {
			return errors.New("natsd: auth: an nkey user without a key")
		}
	}
	return nil
}

// LoadAuth reads the users of a NATS server configuration file: its
// authorization block, with users, their passwords or nkeys, per-user
// permissions and default_permissions (the nats-server syntax, documented
// at https://docs.nats.io/running-a-nats-service/configuration/securing_nats/authorization;
// $VARIABLES are read from the environment). The file may hold nothing
// else that decides who connects: accounts, operator JWTs, a single
// user, a token or a no_auth_user are refused, as the embedded server
// runs everyone in one account.
func LoadAuth(path string) (Auth, error) {
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return Auth{}, fmt.Errorf("natsd: auth file %s: %w", path, err)
	}
	switch {
	case len(opts.Accounts) > 0 || len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0:
		return Auth{}, fmt.Errorf("natsd: auth file %s: accounts and operators are not supported; give users in an authorization block", path)
	case opts.Username != "" || opts.Password != "" || opts.Authorization != "":
		return Auth{}, fmt.Errorf("natsd: auth file %s: a single user or token is not supported; list users in authorization { users: [...] }", path)
	case opts.NoAuthUser != "":
		return Auth{}, fmt.Errorf("natsd: auth file %s: no_auth_user is not supported: every client must log in", path)
	}
	a := Auth{Users: opts.Users, Nkeys: opts.Nkeys}
	if err := a.Validate(); err != nil {
		return Auth{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return a, nil
}
