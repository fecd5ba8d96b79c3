package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// nodeState is what the nodes command learned of one node: what the
// restart check of a Client reads (run id, uptime, marker).
type nodeState struct {
	addr   string
	runID  string
	uptime time.Duration // as reported, whole seconds
	marker string
	err    error
}

// readNode asks node p for its run id and uptime (INFO server) and its
// restart-safety marker.
func readNode(ctx context.Context, p pool.Pool) nodeState {
	s := nodeState{addr: p.Addr()}
	info, err := redis.String(p.Do(ctx, "INFO", "server"))
	if err != nil {
		s.err = err
		return s
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "run_id":
			s.runID = v
		case "uptime_in_seconds":
			n, _ := strconv.ParseInt(v, 10, 64)
			s.uptime = time.Duration(n) * time.Second
		}
	}
	if s.runID == "" {
		s.err = fmt.Errorf("node %s: INFO server has no run_id", p.Addr())
		return s
	}
	s.marker, err = redis.String(p.Do(ctx, "GET", wire.MarkerKey))
	if err != nil && err != redis.ErrNil {
		s.err = err
	}
	return s
}

// verdict says whether restart safety counts the node, with a deployment
// in which some node has a marker (used) or none (new), for Clients whose
// maximum TTL is maxTTL; counted is false while the node is kept out.
func (s nodeState) verdict(used bool, maxTTL time.Duration) (counted bool, why string) {
	// A Client counts the reported uptime less a second (Redis rounds it).
	left := maxTTL - max(s.uptime-time.Second, 0)
	switch {
	case s.marker == s.runID:
		return true, "counted (marked with its run id)"
	case !used:
		return true, "counted at once: no node has a marker (a new deployment)"
	case left <= 0:
		return true, "counted at its next use (up for the maximum TTL), then marked"
	case s.marker == "":
		return false, fmt.Sprintf("not counted for another %v: no marker while other nodes have one (restarted without its data, or new)", left)
	}
	return false, fmt.Sprintf("not counted for another %v: restarted under a new run id (counted at once by Clients with WithDurableNodes, if it keeps every write)", left)
}

// printNodes writes, node by node, whether restart safety counts it, and
// how many nodes it counts.
func printNodes(w io.Writer, states []nodeState, quorum int, maxTTL time.Duration) error {
	used := false
	for _, s := range states {
		used = used || s.err == nil && s.marker != ""
	}
	counted := 0
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRUN ID\tUP\tMARKED\tRESTART SAFETY")
	for _, s := range states {
		if s.err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%v\n", s.addr, s.err)
			continue
		}
		ok, why := s.verdict(used, maxTTL)
		if ok {
			counted++
		}
		marked := map[bool]string{true: "yes", false: "no"}[s.marker == s.runID]
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", s.addr, s.runID, s.uptime, marked, why)
	}
	fmt.Fprintf(w, "%d of %d nodes counted by restart safety (quorum %d; maximum TTL %v)\n", counted, len(states), quorum, maxTTL)
	return tw.Flush()
}
