package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock/redlock"
)

// The tables of `redlock inspect -kind semaphore|rwlock|election`.

// printSemaphore writes what a quorum agrees on (the permits in use) and
// a table of the nodes.
func printSemaphore(w io.Writer, in *redlock.SemaphoreInspection) error {
	used := in.Holders()
	fmt.Fprintf(w, "semaphore %q: %d permits in use on a quorum (%d)", in.Name, len(used), in.Quorum)
	for i, p := range used {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(w, "%sslot %d by client %s (ttl %s)", sep, p.Slot, holder(p), ttl(p.TTL))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSIZE\tQUEUED\tPERMITS\tERROR")
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%v\n", n.Addr, n.Err)
			continue
		}
		var ps []string
		for _, p := range n.Permits {
			state := holder(p.Hold)
			if p.Reserved {
				state = "reserved for " + state
			}
			ps = append(ps, fmt.Sprintf("%d=%s(%s)", p.Slot, state, ttl(p.TTL)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", n.Addr, size(n.Size), n.Queued, list(ps))
	}
	return tw.Flush()
}

// printRWLock writes what a quorum agrees on (the mode and its holders)
// and a table of the nodes.
func printRWLock(w io.Writer, in *redlock.RWInspection) error {
	mode, holds := in.Mode(), in.Holders()
	fmt.Fprintf(w, "read-write lock %q: %s on a quorum (%d)", in.Name, mode, in.Quorum)
	switch mode {
	case redlock.RWWrite:
		fmt.Fprintf(w, ": writer client %s (ttl %s)", holder(holds[0]), ttl(holds[0].TTL))
	case redlock.RWRead:
		fmt.Fprintf(w, ": %d readers, clients %s", len(holds), holders(holds))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tMODE\tWRITER\tREADERS\tINTENT\tEXPIRED\tERROR")
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%v\n", n.Addr, n.Err)
			continue
		}
		note := ""
		if n.Mutex {
			note = "the name is held as a mutex: read-write calls fail here"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Addr, n.Mode, optHold(n.Writer), holders(n.Readers), optHold(n.Intent), n.Expired, note)
	}
	return tw.Flush()
}

// printElection writes the leader a quorum agrees on and a table of the
// nodes.
func printElection(w io.Writer, in *redlock.ElectionInspection) error {
	if l, left, ok := in.Leader(); ok {
		fmt.Fprintf(w, "election %q: leader %s (client %s), term %d, ttl %s, on a quorum (%d)\n",
			in.Name, short(l.Value), l.ClientID, l.Term, ttl(left), in.Quorum)
	} else {
		fmt.Fprintf(w, "election %q: no leader on a quorum (%d): none, or a campaign or resignation under way\n", in.Name, in.Quorum)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHOLDER\tRECORD\tTERM\tCURRENT\tFENCE\tQUEUED\tERROR")
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%v\n", n.Addr, n.Err)
			continue
		}
		h := optHold(n.Holder)
		if n.Reserved {
			h = "reserved"
		}
		record, term := "-", "-"
		if n.Record != nil {
			record, term = short(n.Record.Value)+" ("+n.Record.ClientID+")", fmt.Sprint(n.Record.Term)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%d\t%d\t\n", n.Addr, h, record, term, n.Current, n.Fence, n.Queued)
	}
	return tw.Flush()
}

// holder names a hold's Client, "?" when it cannot be told.
func holder(h redlock.Hold) string {
	if h.Holder == "" {
		return "?"
	}
	return h.Holder
}

// holders lists holds as client(ttl), "-" for none.
func holders(hs []redlock.Hold) string {
	var s []string
	for _, h := range hs {
		s = append(s, holder(h)+"("+ttl(h.TTL)+")")
	}
	return list(s)
}

// optHold is holders of one hold or none.
func optHold(h *redlock.Hold) string {
	if h == nil {
		return "-"
	}
	return holders([]redlock.Hold{*h})
}

// ttl prints a TTL: "none" for -1.
func ttl(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(time.Millisecond).String()
}

// size prints a semaphore's size on a node: "-" when none was set.
func size(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// list joins s with spaces, "-" when empty.
func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

// short quotes a leader's value, cut to 40 bytes.
func short(v string) string {
	if len(v) > 40 {
		return fmt.Sprintf("%q...", v[:40])
	}
	return fmt.Sprintf("%q", v)
}
