package main

import (
	"os"
	"strconv"
	"strings"
)

// contextSwitches returns the voluntary plus involuntary context switches
// of the redis-server (or valkey-server) process pid of this machine, from
// /proc/<pid>/status; -1 when it cannot be told (no pid, no /proc, or the
// pid is another program's: a node on another machine).
func contextSwitches(pid int) int64 {
	if pid <= 0 {
		return -1
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	comm, err := os.ReadFile(dir + "comm")
	if name := string(comm); err != nil || !strings.Contains(name, "redis") && !strings.Contains(name, "valkey") {
		return -1
	}
	status, err := os.ReadFile(dir + "status")
	if err != nil {
		return -1
	}
	return parseSwitches(string(status))
}

// parseSwitches adds up the voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches lines of a /proc status file; -1 without
// both.
func parseSwitches(status string) int64 {
	var n int64
	found := 0
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches" {
			continue
		}
		c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return -1
		}
		n += c
		found++
	}
	if found != 2 {
		return -1
	}
	return n
}
