// Package linediff makes the line diffs of rule documents that rule stores
// (cluster/filestore, cluster/redis) record in their audit logs.
package linediff

import (
	"fmt"
	"strings"
)

// maxDiffLines bounds the documents Lines compares line by line: beyond
// it, the diff says only how many lines each has (the comparison costs the
// product of the line counts).
const maxDiffLines = 2000

// Lines returns a line diff from old to new: the lines only in old
// prefixed "- ", those only in new "+ ", one a line, in document order, or
// "" when the documents have the same lines. Rule stores use it for the Detail of a
// save's cluster.AuditEntry. Documents of more than 2,000 lines are not
// compared; the diff then says how many lines each has.
//
// complexity: the longest-common-subsequence diff: trimming, the table and its walk, in one function as the algorithm reads
func Lines(old, new []byte) string {
	a, b := splitLines(old), splitLines(new)
	// Common head and tail need no table.
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	if len(a) == 0 && len(b) == 0 {
		return ""
	}
	var sb strings.Builder
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		fmt.Fprintf(&sb, "%d lines changed to %d lines (too many to compare)\n", len(a), len(b))
		return sb.String()
	}
	// lcs[i][j] is the longest common subsequence of a[i:] and b[j:].
	w := len(b) + 1
	lcs := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
			sb.WriteString("- " + a[i] + "\n")
			i++
		default:
			sb.WriteString("+ " + b[j] + "\n")
			j++
		}
	}
	return sb.String()
}

func splitLines(doc []byte) []string {
	s := strings.TrimSuffix(string(doc), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
