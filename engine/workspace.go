package engine

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/stratalab/strata/backend"
)

// workspace is a session's prefill buffers (scratch and capture arenas),
// kept by name for the next prefill, so that repeated prefills of the same
// shape allocate nothing. It holds only what the last prefill used.
type workspace struct {
	bufs map[string]backend.Tensor
}

// need is a buffer a prefill uses: its name, its size in elements, and the
// run's field that gets it.
type need struct {
	name string
	n    int
	dst  *backend.Tensor
}

// fit hands out a buffer for each need. It keeps a buffer that holds the
// elements needed and at most twice as many, so that a session holds no more
// than twice what its last prefill needs and a download of a kept buffer
// copies at most twice the data. The rest it frees before allocating any,
// so that a backend that frees at once has that memory back for the new
// buffers. On an error it frees everything: a refused prefill leaves the
// session holding only its KV cache.
//
// Kept buffers hold the last prefill's data, not zeros: every element a
// prefill reads from a scratch buffer it has written first, and a trace
// reads only the captures the run has reached. New host capture arenas may
// hold a collected trace's data too (HostTensors.AllocArena): a finished
// run writes all of them. Host arenas of a run that did not finish are not
// kept: what the backend knows of an arena's contents holds from
// AllocArena to the end of one run.
func (w *workspace) fit(st backend.Stream, host backend.HostTensors, needs []need) error {
	keep := make(map[string]backend.Tensor, len(needs))
	for _, q := range needs {
		if host != nil && strings.HasPrefix(q.name, arenaPrefix) {
			continue
		}
		if x, ok := w.bufs[q.name]; ok && q.n <= x.Len() && x.Len() <= 2*q.n {
			keep[q.name] = x
			delete(w.bufs, q.name)
		}
	}
	dropped := 0
	for _, x := range w.bufs {
		dropped += x.Len()
	}
	w.free(st)
	w.bufs = keep
	if host != nil && dropped >= hostReturn {
		// Host buffers are Go memory, freed only by the collector, which
		// lets the heap grow to twice what is live first: the dropped
		// buffers beside the new ones took a longer prefill after a shorter
		// one to twice its estimate. Collected and given back now, they
		// leave the peak what the new buffers need.
		debug.FreeOSMemory()
	}
	for _, q := range needs {
		x, ok := w.bufs[q.name]
		if !ok {
			alloc := st.Alloc
			if host != nil && strings.HasPrefix(q.name, arenaPrefix) {
				alloc = host.AllocArena
			}
			var err error
			if x, err = alloc(q.name, q.n); err != nil {
				w.free(st)
				return err
			}
			w.bufs[q.name] = x
		}
		*q.dst = x
	}
	return nil
}

// hostReturn is the fewest elements (4 MiB) of dropped host buffers given
// back to the system before a prefill allocates: less is not worth a
// collection.
const hostReturn = 1 << 20

// drop forgets a buffer without freeing it: something else owns it now.
func (w *workspace) drop(name string) { delete(w.bufs, name) }

// arenaName is a host capture arena's name in the workspace.
func arenaName(a int) string { return fmt.Sprintf("%s%d", arenaPrefix, a) }

const arenaPrefix = "capture arena "

// free releases every buffer.
func (w *workspace) free(st backend.Stream) {
	for _, x := range w.bufs {
		st.Free(x)
	}
	w.bufs = nil
}
