package tools

import (
	"net/netip"
	"testing"
)

// last is the highest address of p.
func last(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Every block of the special-purpose registries is refused, from its
// first address to its last; the addresses around them are not.
func TestAddressGuardCoversTheSpecialPurposeRegistries(t *testing.T) {
	tests := []struct {
		name    string
		refused []string
	}{
		{name: "this network", refused: []string{"0.0.0.0", "0.255.255.255"}},
		{name: "private-use", refused: []string{"10.0.0.1", "172.16.0.1", "172.31.255.254", "192.168.1.1"}},
		{name: "shared address space", refused: []string{"100.64.0.0", "100.100.100.200", "100.127.255.255"}},
		{name: "loopback", refused: []string{"127.0.0.1", "127.255.255.254", "::1"}},
		{name: "link local", refused: []string{"169.254.169.254", "fe80::1", "fe80::1%eth0"}},
		{name: "IETF protocol assignments", refused: []string{"192.0.0.8", "192.0.0.170", "2001::1", "2001:1::1", "2001:2::1"}},
		{name: "documentation", refused: []string{"192.0.2.1", "198.51.100.1", "203.0.113.1", "2001:db8::1", "3fff::1"}},
		{name: "AS112 and AMT", refused: []string{"192.31.196.1", "192.52.193.1", "192.175.48.1", "2620:4f:8000::1"}},
		{name: "6to4 relay anycast", refused: []string{"192.88.99.1"}},
		{name: "benchmarking", refused: []string{"198.18.0.1", "198.19.255.255"}},
		{name: "reserved and broadcast", refused: []string{"240.0.0.1", "254.255.255.255", "255.255.255.255"}},
		{name: "multicast", refused: []string{"224.0.0.1", "239.255.255.255", "ff02::1", "ff0e::1"}},
		{name: "unspecified", refused: []string{"::"}},
		{name: "IPv4-mapped private", refused: []string{"::ffff:10.0.0.1", "::ffff:169.254.169.254"}},
		{name: "IPv4-compatible", refused: []string{"::10.0.0.1", "::8.8.8.8"}},
		{name: "NAT64", refused: []string{"64:ff9b::a00:1", "64:ff9b::808:808", "64:ff9b:1::1"}},
		{name: "discard-only and dummy", refused: []string{"100::1", "100:0:0:1::1"}},
		{name: "6to4", refused: []string{"2002:a00:1::1", "2002:c0a8:101::1"}},
		{name: "Teredo", refused: []string{"2001:0:4136:e378:8000:63bf:3fff:fdd2"}},
		{name: "SRv6 SIDs", refused: []string{"5f00::1"}},
		{name: "unique-local and site-local", refused: []string{"fc00::1", "fd12:3456::1", "fec0::1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range tt.refused {
				if a := netip.MustParseAddr(s); publicAddr(a) {
					t.Errorf("%s is allowed", s)
				}
			}
		})
	}
	// Each block, first and last address.
	for _, s := range special {
		for _, a := range []netip.Addr{s.prefix.Masked().Addr(), last(s.prefix)} {
			if publicAddr(a) {
				t.Errorf("%s (%s, %s) is allowed", a, s.prefix, s.name)
			}
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "198.17.255.255", "198.20.0.0",
		"223.255.255.255", "192.0.1.255", "2606:4700:4700::1111", "2001:4860:4860::8888", "2001:200::1", "::ffff:8.8.8.8", "2003::1"} {
		if !publicAddr(netip.MustParseAddr(s)) {
			t.Errorf("public address %s is refused (%s)", s, specialBlock(netip.MustParseAddr(s)))
		}
	}
}
