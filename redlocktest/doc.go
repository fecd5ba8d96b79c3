// Package redlocktest gives tests in-process Redis nodes for the lock
// client of package redlock, with the faults a test needs: a node killed,
// restarted with or without its data, paused, or cut off from one client.
// No Redis server, Docker or network is involved; every node is a
// simulated Redis node behind in-memory connections, reached through the
// real pipelined code of package pool, so the library's own Lua scripts
// and protocol run as they would against Redis.
//
// # Use
//
//	nodes := redlocktest.New(5)
//	defer nodes.Close() // deferred first, so it runs after the Client's Close
//
//	client, err := redlock.New(nodes.Pools())
//	if err != nil {
//		t.Fatal(err)
//	}
//	defer client.Close()
//
//	nodes.Node(4).Kill() // 3 of 5 still make a quorum
//	lock, err := client.TryLock(ctx, "lock:orders:42", time.Second)
//
// Each call of Cluster.Pools stands for one client process, with
// connections of its own; give each simulated process its own Pools and
// Client. Node.Partition cuts one such process off from one node.
//
// Close the Clients before the Cluster. Cluster.Close then leaves no
// goroutine behind, so go.uber.org/goleak and synctest's own check pass.
//
// # Real time
//
// On real time, keep TTLs short (100 ms to a few seconds) so that tests
// of expiry stay fast. The nodes share the CPU with the test: under the
// race detector, or on a small, busy machine, a reply can take longer
// than the lock client's default node timeout (50 ms), which the client
// counts as a slow node, as it would a real one. Tests that run many
// Clients at once are steadier with a longer one, for example
// redlock.WithNodeTimeout(250*time.Millisecond).
//
// # Virtual time (testing/synctest)
//
// The nodes run on the process's clock, so inside a testing/synctest
// bubble every TTL, node timeout and back-off runs on the bubble's
// virtual time: a test can wait out a 30 s lock in a few milliseconds.
// Create the Cluster inside the bubble (its goroutines, channels and
// timers then belong to it) and close it there. The test file needs
// Go 1.25 and synchronous timer channels, with these two lines at its
// top:
//
//	//go:build go1.25
//
//	//go:debug asynctimerchan=0
//
// and then:
//
//	synctest.Test(t, func(t *testing.T) {
//		nodes := redlocktest.New(5)
//		defer nodes.Close()
//		// ... Clients, locks, faults; time.Sleep(time.Minute) returns at once
//	})
//
// # Faults and restarts
//
// A killed node refuses connections, so calls to it fail at once; a
// paused node or a partitioned one never answers, so calls to it time
// out. Start and RestartEmpty bring a node back without its data, as a
// Redis without persistence: redlock's restart safety then leaves it out
// of every quorum until it has been up for the maximum TTL
// (redlock.WithRestartSafety, 1 minute by default; the bubble's virtual
// time makes that wait free). Restart keeps the data, and is counted at
// once by Clients built with redlock.WithDurableNodes.
//
// # What is not simulated
//
// The nodes are independent masters with no replication, cluster mode,
// persistence timing, memory limits or eviction. Scripts run in
// gopher-lua, not Redis's Lua. The nodes answer the commands the library
// sends and those a test inspects keys with: strings (GET, SET, DEL,
// EXISTS, TYPE, TTL, PTTL, EXPIRE, PEXPIRE, PERSIST, INCR, MGET, KEYS,
// DBSIZE, FLUSHALL), hashes (HSET, HGET, HMGET, HGETALL, HDEL, HLEN,
// HEXISTS), sorted sets (ZADD, ZREM, ZCARD, ZSCORE, ZCOUNT, ZRANGE by
// rank, ZRANGEBYSCORE, ZPOPMIN), PUBLISH and SUBSCRIBE, MULTI and EXEC,
// EVAL, EVALSHA and SCRIPT, PING, ECHO, TIME, INFO and CLIENT, in database
// 0; others are refused as unknown commands. Connections are lossless
// until closed (as TCP is): there is no packet loss, reordering or
// latency unless a node is paused or partitioned. Every node's clock is
// the process's clock (no drift or jumps), and goroutine scheduling is the
// Go runtime's.
package redlocktest
