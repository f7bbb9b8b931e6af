package sluiceredis

import (
	"strings"
	"testing"
)

func TestEscapeTag(t *testing.T) {
	for in, want := range map[string]string{
		"plain":      "plain",
		"a{b}c":      "a%7Bb%7Dc",
		"100%":       "100%25",
		"%7B":        "%257B",
		"}":          "%7D",
		"user:42:id": "user:42:id",
	} {
		got := escapeTag(in)
		if got != want {
			t.Errorf("escapeTag(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(got, "{}") {
			t.Errorf("escapeTag(%q) = %q keeps a brace", in, got)
		}
	}
	if escapeTag("a{") == escapeTag("a%7B") {
		t.Error("escaping is not injective")
	}
}

// TestSlot checks the CRC16 against the reference values of the Redis
// Cluster specification (the cluster test compares it with CLUSTER KEYSLOT).
func TestSlot(t *testing.T) {
	if got := slot("123456789"); got != 0x31C3&16383 {
		t.Errorf("slot(123456789) = %d, want %d", got, 0x31C3&16383)
	}
	if got := slot("foo"); got != 12182 {
		t.Errorf("slot(foo) = %d, want 12182", got)
	}
}

func TestKeysShareTag(t *testing.T) {
	s := New(nil, WithPrefix("p{x}"))
	k1, k2 := s.budgetKeys(escapeTag("a}b"), algWindow)
	for _, k := range []string{k1, k2} {
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open:], '}')
		if tag := k[open+1 : open+end]; tag != "a%7Db" {
			t.Errorf("key %q: hash tag %q, want a%%7Db", k, tag)
		}
	}
}
