package ibtransport

// MaxSGE returns the longest SGL a WR posted to s may have (SRQInitAttr.MaxSGE):
// the C library checks a WR's SGE count against it before it reads the list.
func (s *SRQ) MaxSGE() int { return s.maxSGE }
