package policies

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
)

// YAML renders a definition's content as a definition file, which Parse
// reads back to the same content (the same ContentHash).
func YAML(d Definition) ([]byte, error) {
	b, err := yaml.MarshalWithOptions(content(d), yaml.UseLiteralStyleIfMultiline(true), yaml.Indent(2), yaml.IndentSequence(true))
	if err != nil {
		return nil, fmt.Errorf("policies: render %s as YAML: %w", d.Name, err)
	}
	return b, nil
}

// diffContext is the unchanged lines a hunk shows around a change.
const diffContext = 3

// maxDiffCells bounds the table of the line diff: beyond it the changed
// middle is shown as removed and added whole, which is still a correct
// diff, only not the smallest.
const maxDiffCells = 4 << 20

// Diff is a unified diff of two versions' YAML, labelled a and b; ""
// when their content is the same.
func Diff(a, b Definition, labelA, labelB string) (string, error) {
	ya, err := YAML(a)
	if err != nil {
		return "", err
	}
	yb, err := YAML(b)
	if err != nil {
		return "", err
	}
	return unified(lines(string(ya)), lines(string(yb)), labelA, labelB), nil
}

func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	text string
	a, b int // 0-based line of the line in a and b (the next one for adds and removes)
}

// script is the edit script from a to b: common prefix and suffix, and a
// longest common subsequence of what is between.
func script(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []op
	for i := range pre {
		out = append(out, op{' ', a[i], i, i})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(ma)*len(mb) > maxDiffCells {
		for i, l := range ma {
			out = append(out, op{'-', l, pre + i, pre})
		}
		for j, l := range mb {
			out = append(out, op{'+', l, pre + len(ma), pre + j})
		}
	} else {
		// lcs[i][j] is the length of a longest common subsequence of
		// ma[i:] and mb[j:].
		w := len(mb) + 1
		lcs := make([]int32, (len(ma)+1)*w)
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else {
					lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(ma) || j < len(mb) {
			switch {
			case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
				out = append(out, op{' ', ma[i], pre + i, pre + j})
				i, j = i+1, j+1
			case j < len(mb) && (i == len(ma) || lcs[i*w+j+1] > lcs[(i+1)*w+j]):
				out = append(out, op{'+', mb[j], pre + i, pre + j})
				j++
			default:
				out = append(out, op{'-', ma[i], pre + i, pre + j})
				i++
			}
		}
	}
	for k := range suf {
		ia, ib := len(a)-suf+k, len(b)-suf+k
		out = append(out, op{' ', a[ia], ia, ib})
	}
	return out
}

// unified renders the diff of a and b in unified format.
func unified(a, b []string, labelA, labelB string) string {
	ops := script(a, b)
	// A hunk runs from diffContext lines before a change to diffContext
	// after the last change that follows within 2*diffContext lines.
	var hunks [][2]int // [start, end) indexes into ops
	last := -1         // the last change seen
	for i, o := range ops {
		if o.kind == ' ' {
			continue
		}
		if n := len(hunks); n > 0 && i-last <= 2*diffContext {
			hunks[n-1][1] = min(len(ops), i+1+diffContext)
		} else {
			hunks = append(hunks, [2]int{max(0, i-diffContext), min(len(ops), i+1+diffContext)})
		}
		last = i
	}
	if len(hunks) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", labelA, labelB)
	for _, h := range hunks {
		hs := ops[h[0]:h[1]]
		na, nb := 0, 0
		for _, o := range hs {
			if o.kind != '+' {
				na++
			}
			if o.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(hs[0].a, na), hunkRange(hs[0].b, nb))
		for _, o := range hs {
			sb.WriteByte(o.kind)
			sb.WriteString(o.text)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// hunkRange is a hunk's range in unified format: "start,count", 1-based,
// the line before an empty range.
func hunkRange(start0, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start0)
	}
	if n == 1 {
		return fmt.Sprint(start0 + 1)
	}
	return fmt.Sprintf("%d,%d", start0+1, n)
}
