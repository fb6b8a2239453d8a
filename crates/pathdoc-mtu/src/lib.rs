//! Path-MTU check: MTU both ways, PMTUD black holes, MSS clamping.
