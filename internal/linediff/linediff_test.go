package linediff

import (
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"same", "a\nb\n", "a\nb", ""},
		{"both empty", "", "", ""},
		{"from nothing", "", "a\nb\n", "+ a\n+ b\n"},
		{"to nothing", "a\n", "", "- a\n"},
		{"changed line", "a\nb\nc\n", "a\nB\nc\n", "- b\n+ B\n"},
		{"insert and delete", "a\nb\nc\nd\n", "a\nc\nd\ne\n", "- b\n+ e\n"},
		{"moved", "x\ny\n", "y\nx\n", "- x\n+ x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lines([]byte(tt.old), []byte(tt.new)); got != tt.want {
				t.Fatalf("Lines(%q, %q) = %q, want %q", tt.old, tt.new, got, tt.want)
			}
		})
	}
	big := strings.Repeat("x\n", 3000)
	if got := Lines([]byte("a\n"+big), []byte("b\n"+big)); got != "- a\n+ b\n" {
		t.Fatalf("a common tail is trimmed before comparing: got %q", got)
	}
	if got := Lines([]byte(big), []byte(strings.Repeat("y\n", 2500))); !strings.Contains(got, "3000 lines changed to 2500 lines") {
		t.Fatalf("too large to compare: got %q", got)
	}
}
