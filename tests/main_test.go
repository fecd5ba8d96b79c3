// Package tests holds the integration and fault tests of the lock client
// against real redis-server processes started by internal/redistest.
//
// Every test starts its own nodes. Without redis-server on PATH the tests
// skip, unless REDLOCK_REQUIRE_REDIS=1 makes them fail instead.
package tests

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
