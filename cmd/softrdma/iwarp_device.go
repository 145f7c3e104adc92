package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// openIWARPDevice opens an iWARP device whose engine is seeded from crypto/rand.
// With the zero seed (iwarp.Open's DeviceConfig{}), every run allocated the same
// QPNs, STags and region addresses: rping and conform serve advertised the same
// STag and address each time, which a peer could use without being told them.
func openIWARPDevice() (*iwarp.Device, error) {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("iwarp device seed: %w", err)
	}
	return iwarp.Open(iwarp.DeviceConfig{Context: ibtransport.ContextConfig{Seed: binary.LittleEndian.Uint64(b[:])}})
}
