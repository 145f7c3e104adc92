package capture

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Log returns the client's and the server's output saved with the capture
// name in dir: the file dir/logs/NAME.log, the client's part before the line
// "## server output" and the server's after it.
func Log(dir, name string) (client, server string, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, "logs", name+".log"))
	if err != nil {
		return "", "", err
	}
	parts := strings.SplitN(string(raw), "## server output", 2)
	if len(parts) != 2 {
		return "", "", fmt.Errorf("%s.log: no server section", name)
	}
	return parts[0], parts[1], nil
}
