package redistest

import (
	"os"
	"testing"
)

// requireEnv names the environment variable that, set to 1, turns a missing
// redis-server from a skipped test into a failed one.
const requireEnv = "REDLOCK_REQUIRE_REDIS"

// StartT is Start for tests, taking at most one Options. If redis-server is
// missing it skips the test with a message saying how to install it, or
// fails it if $REDLOCK_REQUIRE_REDIS is 1. Any other error fails the test.
// The cluster is closed when the test and its subtests finish.
func StartT(t testing.TB, n int, opts ...Options) *Cluster {
	t.Helper()
	if len(opts) > 1 {
		t.Fatalf("redistest.StartT: got %d Options, want at most 1", len(opts))
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	skipWithoutServer(t)
	c, err := Start(n, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("redistest: closing cluster: %v", err)
		}
	})
	return c
}

// skipWithoutServer skips t when redis-server is missing, or fails it when
// $REDLOCK_REQUIRE_REDIS is 1.
func skipWithoutServer(t testing.TB) {
	t.Helper()
	if _, err := Path(); err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("%v (%s=1)", err, requireEnv)
		}
		t.Skipf("%v (set %s=1 to fail instead of skipping)", err, requireEnv)
	}
}
