package adaptive

import "testing"

// TestMaterialChange: a move is material at a tenth of the last reported
// limit, cumulated over small steps, and onto Min or Max from elsewhere.
func TestMaterialChange(t *testing.T) {
	l := New(Config{Min: 5, Max: 40, Initial: 20}, 0)
	for _, tt := range []struct {
		to   int64
		want bool
	}{
		{21, false}, // 1 of 20
		{22, true},  // 2 of 20: a tenth, cumulated
		{23, false}, // reported 22 now
		{24, false}, // 2 < 2.2
		{25, true},  // 3 of 22
		{40, true},  // onto Max
		{39, false}, // 1 of 40
		{40, false}, // back where last reported
		{36, true},  // 4 of 40
		{6, true},
		{5, true}, // onto Min by one
		{5, false},
	} {
		got := l.material(tt.to)
		if got != tt.want {
			t.Fatalf("from reported %d to %d: material %v, want %v", l.reported, tt.to, got, tt.want)
		}
		if got {
			l.reported = tt.to
		}
	}
}
