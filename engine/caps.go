package engine

import (
	"fmt"

	"github.com/stratalab/strata/backend"
)

// offers is what a tier's stream offers beyond the kernels, as its
// backend's Capabilities say: the optional methods, nil where not offered.
type offers struct {
	host    backend.HostTensors
	capture backend.AttentionCapture
	routing backend.ExpertRouting
}

// offersOf is what b's Capabilities offer on its stream st; a capability
// whose methods st lacks is an error naming both.
func offersOf(b backend.Backend, st backend.Stream) (offers, error) {
	c := b.Capabilities()
	var o offers
	var ok bool
	if c.HostTensors {
		if o.host, ok = st.(backend.HostTensors); !ok {
			return offers{}, fmt.Errorf("engine: backend %s offers host tensors, but its stream (%T) lacks HostTensors' methods", b.Name(), st)
		}
	}
	if c.AttentionCapture {
		if o.capture, ok = st.(backend.AttentionCapture); !ok {
			return offers{}, fmt.Errorf("engine: backend %s offers attention capture, but its stream (%T) lacks FlashAttentionCapture", b.Name(), st)
		}
	}
	if c.ExpertRouting {
		if o.routing, ok = st.(backend.ExpertRouting); !ok {
			return offers{}, fmt.Errorf("engine: backend %s offers expert routing, but its stream (%T) lacks ExpertRouting's methods", b.Name(), st)
		}
	}
	return o, nil
}
