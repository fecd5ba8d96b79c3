package redistest

import (
	"fmt"
	"os"
	"os/exec"
)

// binaryEnv names the environment variable that overrides the redis-server
// binary looked up on PATH.
const binaryEnv = "REDIS_SERVER"

// installHint tells the user how to make redis-server available.
const installHint = "install it (e.g. apt-get install redis-server) or set $" + binaryEnv + " to its path"

// Path returns the redis-server binary named by $REDIS_SERVER, or else the
// one found on PATH. The error says how to install it when it is missing.
func Path() (string, error) {
	if p := os.Getenv(binaryEnv); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("redistest: $%s=%q is not an executable redis-server (%v); %s", binaryEnv, p, err, installHint)
		}
		return path, nil
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server not found on PATH; %s", installHint)
	}
	return path, nil
}
