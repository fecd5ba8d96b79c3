package redlock

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// automatic extension, late node replies and timers must all be gone once
// every lock is released and every Client closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
