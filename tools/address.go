package tools

import "net/netip"

// special are the address blocks the HTTP tools never connect to (unless
// private addresses are allowed): every entry of IANA's IPv4 and IPv6
// Special-Purpose Address Registries (RFC 6890 and its updates), whether
// or not the registry calls it globally reachable, and the multicast
// blocks. Several lead somewhere else than they seem: 100.64.0.0/10
// holds cloud metadata services, NAT64 (64:ff9b::/96), 6to4 (2002::/16)
// and Teredo (2001::/32) embed IPv4 addresses that may be private.
var special = []struct {
	prefix netip.Prefix
	name   string
}{
	// IPv4 (iana-ipv4-special-registry).
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("10.0.0.0/8"), "private-use"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT, cloud metadata)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private-use"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (TEST-NET-1)"},
	{netip.MustParsePrefix("192.31.196.0/24"), "AS112-v4"},
	{netip.MustParsePrefix("192.52.193.0/24"), "AMT"},
	{netip.MustParsePrefix("192.88.99.0/24"), "deprecated 6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private-use"},
	{netip.MustParsePrefix("192.175.48.0/24"), "direct delegation AS112 service"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (TEST-NET-3)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("255.255.255.255/32"), "limited broadcast"},
	// IPv6 (iana-ipv6-special-registry).
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("64:ff9b::/96"), "IPv4/IPv6 translation (NAT64)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use IPv4/IPv6 translation"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("100:0:0:1::/64"), "dummy IPv6 prefix"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments (Teredo, benchmarking, ORCHID, AMT, AS112, DRIP)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2620:4f:8000::/48"), "direct delegation AS112 service"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("5f00::/16"), "segment routing (SRv6) SIDs"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local unicast"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// publicAddr reports whether a is an address the HTTP tools may connect
// to: valid and in no special-purpose block. An IPv4-mapped address is
// judged by its IPv4 address.
func publicAddr(a netip.Addr) bool {
	return a.IsValid() && specialBlock(a) == ""
}

// specialBlock names the special-purpose block a is in, or "".
func specialBlock(a netip.Addr) string {
	if a.Is4In6() {
		a = a.Unmap()
	}
	a = a.WithZone("")
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.name
		}
	}
	return ""
}
