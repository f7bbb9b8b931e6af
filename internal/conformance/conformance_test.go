package conformance

import "testing"

func TestScale(t *testing.T) {
	tests := []struct {
		give string
		want int
	}{
		{"", 1}, {"x", 1}, {"0", 1}, {"-3", 1}, {"1", 1}, {"20", 20},
	}
	for _, tt := range tests {
		t.Setenv("SLUICE_CONFORMANCE_SCALE", tt.give)
		if got := Scale(); got != tt.want {
			t.Errorf("Scale() with %q = %d, want %d", tt.give, got, tt.want)
		}
		if got := Steps(5); got != 5*tt.want {
			t.Errorf("Steps(5) with %q = %d, want %d", tt.give, got, 5*tt.want)
		}
	}
}
