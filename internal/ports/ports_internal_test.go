package ports

import "testing"

// TestOutside: the range Free picks from lies outside the
// kernel's ephemeral range wherever one holds enough ports, and none is
// claimed where the ephemeral range takes (nearly) every port.
func TestOutside(t *testing.T) {
	tests := []struct {
		name     string
		elo, ehi int
		lo, hi   int
		ok       bool
	}{
		{name: "linux default", elo: 32768, ehi: 60999, lo: 10000, hi: 32768, ok: true},
		{name: "starts below 11000", elo: 10500, ehi: 60999, lo: 1024, hi: 10500, ok: true},
		{name: "starts low", elo: 5000, ehi: 65000, lo: 1024, hi: 5000, ok: true},
		{name: "ends low", elo: 1500, ehi: 40000, lo: 40001, hi: 65536, ok: true},
		{name: "every unprivileged port", elo: 1024, ehi: 65535, ok: false},
		{name: "little room on either side", elo: 1500, ehi: 65000, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi, ok := Outside(tt.elo, tt.ehi)
			if ok != tt.ok || ok && (lo != tt.lo || hi != tt.hi) {
				t.Fatalf("Outside(%d, %d) = [%d, %d), %v; want [%d, %d), %v", tt.elo, tt.ehi, lo, hi, ok, tt.lo, tt.hi, tt.ok)
			}
			if !ok {
				return
			}
			if lo < 1024 || hi > 65536 || hi-lo < minRoom {
				t.Fatalf("[%d, %d): not %d unprivileged ports", lo, hi, minRoom)
			}
			if lo <= tt.ehi && tt.elo < hi {
				t.Fatalf("[%d, %d) overlaps the ephemeral range %d–%d", lo, hi, tt.elo, tt.ehi)
			}
		})
	}
}
