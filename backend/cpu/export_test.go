package cpu

// PoisonReusedArenas makes reused capture arenas hold NaN until written.
func PoisonReusedArenas(on bool) { poisonReused.Store(on) }

// ArenasReturned, ArenasRecycled and ArenasReused count capture arenas the
// collector gave back, those closed traces gave back and those given out
// again.
func ArenasReturned(b *Backend) int64 { return b.arenas.returned.Load() }
func ArenasRecycled(b *Backend) int64 { return b.arenas.recycled.Load() }
func ArenasReused(b *Backend) int64   { return b.arenas.reused.Load() }

// MasksKept counts arenas whose masked attention entries were not written
// again.
func MasksKept(b *Backend) int64 { return b.arenas.masksKept.Load() }

// ArenasWaiting counts collected arenas waiting for a prefill.
func ArenasWaiting(b *Backend) int {
	b.arenas.mu.Lock()
	defer b.arenas.mu.Unlock()
	n := 0
	for _, m := range []map[int][]pooled{b.arenas.fresh, b.arenas.old} {
		for _, firsts := range m {
			n += len(firsts)
		}
	}
	return n
}
