// Package redistest starts, stops and breaks real redis-server processes
// for tests and benchmarks.
//
// Each node runs in its own temporary directory on a free 127.0.0.1 port,
// with persistence disabled (or, with Options.Durable, an append-only file
// synced on every write) and its output logged to a file in that
// directory. Nodes can be killed, restarted on the same port with their
// data (Restart) or without it (RestartEmpty), paused (SIGSTOP) and
// resumed (SIGCONT) to simulate crashes and network stalls. Package
// internal/faults builds a fault schedule on top of it.
//
// A typical test:
//
//	func TestLock(t *testing.T) {
//		c := redistest.StartT(t, 5)
//		c.Node(0).Kill()
//		// ... exercise code against c.Addrs() ...
//	}
//
// StartT skips the test when redis-server is not installed, unless the
// environment variable REDLOCK_REQUIRE_REDIS is set to 1.
//
// The package requires a Unix system. On Linux every child process is
// started with a parent-death signal (SIGKILL), so no redis-server outlives
// the process that started it, even if that process crashes.
package redistest
