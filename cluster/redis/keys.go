package sluiceredis

import "strings"

// Key suffixes, one per kind of state. The algorithm is part of a budget's
// key names, so a rule that changes a budget's algorithm starts from fresh
// state instead of meeting a key of the wrong type.
const (
	sufBucket    = ":tb"   // token bucket: hash {t: tokens, ts: µs}
	sufWindow    = ":sw"   // sliding window: hash {n: permits in log, seq}
	sufWindowLog = ":log"  // sliding window: zset of grants (after :sw), score µs
	sufPacing    = ":gcra" // pacing: string, theoretical arrival time µs
	sufCalendar  = ":q"    // calendar quota: string, permits granted
	appInfix     = ":app:" // heartbeats: <prefix>:app:{<app>}...
	sufMembers   = ":members"
	sufMember    = ":m:"
	sufEpoch     = ":epoch" // string: the index's epoch (see beatSrc)
)

// escapeTag makes s safe inside a Redis Cluster hash tag: '%', '{' and '}'
// become %25, %7B and %7D, so that a tag always ends where the Store closes
// it and no user string can move a key to another slot. Strings without
// those bytes are returned unchanged (no allocation).
func escapeTag(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// budgetKeys returns the key names of budget key (already escaped) for
// algorithm alg: the tag is "{key}", so every key of one budget lives in one
// Cluster slot. The second name is empty except for a sliding window.
func (s *Store) budgetKeys(tag string, alg byte) (string, string) {
	switch alg {
	case algBucket:
		return s.prefix + ":{" + tag + "}" + sufBucket, ""
	case algWindow:
		base := s.prefix + ":{" + tag + "}" + sufWindow
		return base, base + sufWindowLog
	case algCalendar:
		return s.prefix + ":{" + tag + "}" + sufCalendar, ""
	default:
		return s.prefix + ":{" + tag + "}" + sufPacing, ""
	}
}

// appBase returns "<prefix>:app:{<app>}", the stem of every heartbeat key
// of app.
func (s *Store) appBase(app string) string {
	return s.prefix + appInfix + "{" + escapeTag(app) + "}"
}

// slot returns the Redis Cluster slot of the hash tag tag (the text between
// the braces): CRC16-XMODEM of tag modulo 16384, as CLUSTER KEYSLOT
// computes it for a key containing "{tag}" as its first hash tag.
func slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^tag[i]]
	}
	return crc & 16383
}

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return
}()
