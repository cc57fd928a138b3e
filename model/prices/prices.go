package prices

import "strings"

// Price is a model's list price in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64
	OutputPerMTok float64
}

// table holds list prices of the common models, USD per million tokens, for
// standard (not batch, not cached) requests. They are a snapshot: an
// operator overrides them with model.WithPrice where a contract or a newer
// price list says otherwise. Keys are base names; dated snapshots and
// -latest aliases resolve to them (see Lookup).
var table = map[string]Price{
	// Anthropic.
	"claude-opus-5-5":   {4, 20},
	"claude-opus-5":     {5, 25},
	"claude-sonnet-5-5": {2, 10},
	"claude-sonnet-5":   {2, 10},
	"claude-opus-4-6":   {5, 25},
	"claude-sonnet-4-6": {3, 15},
	"claude-opus-4-5":   {5, 25},
	"claude-sonnet-4-5": {3, 15},
	"claude-haiku-4-5":  {1, 5},
	"claude-opus-4-1":   {15, 75},
	"claude-opus-4":     {15, 75},
	"claude-opus-4-0":   {15, 75},
	"claude-sonnet-4":   {3, 15},
	"claude-sonnet-4-0": {3, 15},
	"claude-3-7-sonnet": {3, 15},
	"claude-3-5-sonnet": {3, 15},
	"claude-3-5-haiku":  {0.80, 4},
	"claude-3-opus":     {15, 75},
	"claude-3-haiku":    {0.25, 1.25},

	// OpenAI.
	"gpt-5.2":      {1.75, 14},
	"gpt-5.1":      {1.25, 10},
	"gpt-5":        {1.25, 10},
	"gpt-5-mini":   {0.25, 2},
	"gpt-5-nano":   {0.05, 0.40},
	"gpt-4.1":      {2, 8},
	"gpt-4.1-mini": {0.40, 1.60},
	"gpt-4.1-nano": {0.10, 0.40},
	"gpt-4o":       {2.50, 10},
	"gpt-4o-mini":  {0.15, 0.60},
	"o3":           {2, 8},
	"o3-mini":      {1.10, 4.40},
	"o4-mini":      {1.10, 4.40},
	"o1":           {15, 60},
}

// Lookup finds the list price of a model by its provider name. It
// accepts dated snapshots ("claude-sonnet-4-5-20250929",
// "gpt-4o-2024-08-06"), "-latest" aliases and a router's vendor prefix
// ("openai/gpt-4o"); anything else must match exactly, so a new model is
// reported unknown rather than priced as an older one.
func Lookup(name string) (Price, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	if i := strings.LastIndexByte(n, '/'); i >= 0 {
		n = n[i+1:]
	}
	if p, ok := table[n]; ok {
		return p, true
	}
	n = trimSnapshot(n)
	p, ok := table[n]
	return p, ok
}

// trimSnapshot drops a "-latest", "-YYYYMMDD" or "-YYYY-MM-DD" suffix.
func trimSnapshot(n string) string {
	if s, ok := strings.CutSuffix(n, "-latest"); ok {
		return s
	}
	if len(n) > 9 && n[len(n)-9] == '-' && allDigits(n[len(n)-8:]) {
		return n[:len(n)-9]
	}
	if len(n) > 11 {
		d := n[len(n)-11:]
		if d[0] == '-' && d[5] == '-' && d[8] == '-' && allDigits(d[1:5]) && allDigits(d[6:8]) && allDigits(d[9:]) {
			return n[:len(n)-11]
		}
	}
	return n
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
