package cli

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/jetloop/jetloop/streams"
)

// sizeValue is a flag holding a size in bytes, written as a number with an
// optional unit: 8GiB, 512MiB, 2G (powers of 1024 all), or plain bytes.
type sizeValue struct{ n int64 }

func (s *sizeValue) String() string {
	if s == nil || s.n == 0 {
		return ""
	}
	return formatSize(s.n)
}

func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	s.n = n
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(t[len(num):])), "B"), "I")
	mult := map[string]int64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || mult == 0 || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a number of bytes, or one with a unit such as 512MiB or 8GiB", v)
	}
	return n * mult, nil
}

func formatSize(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// devBudget is the storage budget of `jetloop dev` on dir when none is
// given: the default, or half of what the embedded server will let
// JetStream use there (75% of the free space) when that is less.
func devBudget(dir string) (budget int64, reduced bool) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return streams.DefaultStorageBudget, false
	}
	room := int64(fs.Bavail) * int64(fs.Bsize) / 4 * 3
	if half := room / 2; half < streams.DefaultStorageBudget {
		return max(half, 64<<20), true
	}
	return streams.DefaultStorageBudget, false
}
