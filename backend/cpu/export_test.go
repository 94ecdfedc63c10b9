package cpu

import "sync/atomic"

// PoisonReusedArenas makes reused capture arenas hold NaN until written.
func PoisonReusedArenas(on bool) { poisonReused.Store(on) }

// ArenaCounts counts capture arenas the collector gave back, those closed
// traces gave back, those given out again, and those whose masked
// attention entries were not written again.
type ArenaCounts struct {
	Returned, Recycled, Reused, MasksKept atomic.Int64
}

// CountArenas counts b's arena events from now on.
func CountArenas(b *Backend) *ArenaCounts {
	c := &ArenaCounts{}
	count := map[arenaEvent]*atomic.Int64{arenaReturned: &c.Returned, arenaRecycled: &c.Recycled, arenaReused: &c.Reused, arenaMasksKept: &c.MasksKept}
	f := func(e arenaEvent) { count[e].Add(1) }
	b.arenas.observe.Store(&f)
	return c
}

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

// FusedCapture reports whether attention captures its scores and patterns
// in flashTiled (AVX-512), the only writer that keeps masked entries.
func FusedCapture() bool { return hasPanelGEMM }
