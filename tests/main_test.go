// Package tests holds the integration and fault tests of the lock client
// against real redis-server processes started by internal/redistest.
//
// Every test starts its own nodes. Without redis-server on PATH the tests
// skip, unless REDLOCK_REQUIRE_REDIS=1 makes them fail instead.
//
// Most tests call t.Parallel: with nodes of their own and keys named by
// newKey, they share nothing, and they spend their time waiting on nodes,
// TTLs and timeouts rather than on the CPU. A test stays serial (no
// t.Parallel) when:
//   - it asserts how long something took (a call that must return within
//     a bound, a validity near a TTL);
//   - healthy nodes must answer it within tens of milliseconds (a node
//     timeout or a deadline that short);
//   - it restarts a node: redistest starts it again on the same port,
//     which a connection or a node of a test beside it could take in
//     between;
//   - it uses state of the whole process (its goroutines, environment
//     variables, worker processes, the safety tests' fault schedules);
//   - it keeps the CPU busy for long (the fence hammers): that would
//     starve the nodes of the tests beside it, and a reply later than a
//     pool's I/O timeout drops the connection;
//   - its waits, bounded by a few seconds, ran out beside parallel tests
//     on a loaded machine.
//
// Go runs every serial test before the parallel ones start, so these run
// on a machine no other test of the package is loading. The parallel
// ones run -parallel at a time (GOMAXPROCS by default): at 4 on two
// shared cores, tests whose waits are bounded by seconds failed.
package tests

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
