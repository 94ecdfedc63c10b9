package gpu

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
