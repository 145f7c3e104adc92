// Package sim is a deterministic, seeded network simulator with a virtual clock:
// links with delay, bandwidth, loss, reordering, duplication, corruption and partitions.
package sim
