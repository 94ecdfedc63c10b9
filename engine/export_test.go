package engine

// HostSpare counts the slices of host memory s keeps for its next traces' reads.
func HostSpare(s *Session) int {
	s.host.mu.Lock()
	defer s.host.mu.Unlock()
	n := 0
	for _, d := range s.host.spare {
		n += len(d)
	}
	return n
}

// DrawDistribution is what Draws.Next draws from: s.Distribution, in id
// order where no filter sorts.
func DrawDistribution(s Sampler, logits []float32) ([]int32, []float64, error) {
	return s.distribution(logits, false)
}
