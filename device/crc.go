package device

import (
	"fmt"

	"github.com/softrdma/softrdma/iwarp"
)

// ParseCRCPolicy reads the --crc flag of an iWARP device's commands: accept
// (also ""), request or require (iwarp.CRCPolicy).
func ParseCRCPolicy(s string) (iwarp.CRCPolicy, error) {
	switch s {
	case "accept", "":
		return iwarp.CRCAccept, nil
	case "request":
		return iwarp.CRCRequest, nil
	case "require":
		return iwarp.CRCRequire, nil
	}
	return 0, fmt.Errorf("--crc %q: want accept, request or require", s)
}
