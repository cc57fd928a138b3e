package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
)

// Networks is a set of source networks a receiver accepts. The zero value
// accepts every address.
type Networks struct {
	prefixes []netip.Prefix
}

// ParseNetworks reads a list of networks: either one CIDR prefix or
// address a line, with blank lines and '#' comments, or the JSON that
// GitHub's meta API (GET https://api.github.com/meta) answers, of which
// the "hooks" ranges are taken. name is used in errors. An empty list is
// an error: it would refuse every sender.
func ParseNetworks(name string, b []byte) (Networks, error) {
	var out Networks
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		var meta struct {
			Hooks []string `json:"hooks"`
		}
		dec := json.NewDecoder(bytes.NewReader(t))
		if err := dec.Decode(&meta); err != nil {
			return Networks{}, fmt.Errorf("%s: not GitHub meta JSON: %w", name, err)
		}
		if dec.More() {
			return Networks{}, fmt.Errorf("%s: data after the JSON object", name)
		}
		for i, s := range meta.Hooks {
			p, err := parsePrefix(s)
			if err != nil {
				return Networks{}, fmt.Errorf("%s: hooks[%d]: %w", name, i, err)
			}
			out.prefixes = append(out.prefixes, p)
		}
	} else {
		for i, line := range strings.Split(string(b), "\n") {
			if c := strings.IndexByte(line, '#'); c >= 0 {
				line = line[:c]
			}
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			p, err := parsePrefix(line)
			if err != nil {
				return Networks{}, fmt.Errorf("%s:%d: %w", name, i+1, err)
			}
			out.prefixes = append(out.prefixes, p)
		}
	}
	if len(out.prefixes) == 0 {
		return Networks{}, fmt.Errorf("%s: no networks (it would refuse every sender)", name)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("network %q: %w", s, err)
		}
		if p.Addr().Is4In6() {
			return netip.Prefix{}, fmt.Errorf("network %q: write IPv4 networks as IPv4", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("network %q: not a CIDR prefix or an address", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// LoadNetworks reads ParseNetworks' format from the file at path.
func LoadNetworks(path string) (Networks, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Networks{}, fmt.Errorf("source networks: %w", err)
	}
	return ParseNetworks(path, b)
}

// Len is the number of networks; 0 for the zero value.
func (n Networks) Len() int { return len(n.prefixes) }

// Allows reports whether a is inside one of the networks; every address
// is, for the zero value.
func (n Networks) Allows(a netip.Addr) bool {
	if len(n.prefixes) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range n.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Check refuses, with ErrForbidden, a request from outside the networks.
func (n Networks) Check(r *http.Request) error {
	if a := RemoteAddr(r); !n.Allows(a) {
		return fmt.Errorf("%w: %s is outside the %d source networks this receiver accepts", ErrForbidden, a, len(n.prefixes))
	}
	return nil
}
