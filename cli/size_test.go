package cli

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "8GiB", want: 8 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "2G", want: 2 << 30},
		{in: "64kb", want: 64 << 10},
		{in: "1048576", want: 1 << 20},
		{in: "1TiB", want: 1 << 40},
		{in: "", err: true},
		{in: "0", err: true},
		{in: "-1G", err: true},
		{in: "8PB", err: true},
		{in: "GiB", err: true},
		{in: "99999999999T", err: true},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil && formatSize(got) == "" {
			t.Errorf("formatSize(%d) is empty", got)
		}
	}
}
