package window

// Snapshot is a copy of a Window's counters, read one by one (a writer
// racing the copy may or may not be in it). A rule that replaces the
// window's owner with other counting state reads its predecessor's counts
// from it.
type Snapshot [windowRing]uint64

// Snapshot copies the window's counters.
func (w *Window) Snapshot() (s Snapshot) {
	for i := range w.words {
		s[i] = w.words[i].Load()
	}
	return s
}

// Count returns the count of bucket epoch in the snapshot: zero when its
// slot holds another bucket.
func (s *Snapshot) Count(epoch int64) uint64 {
	return count(s[epoch&(windowRing-1)], epoch)
}
