package tests

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
)

// excludedNodes records the nodes a Client's restart safety excluded.
type excludedNodes struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (e *excludedNodes) Round(*redlock.RoundInfo) {}

func (e *excludedNodes) Event(ev redlock.Event) {
	if ev.Kind == redlock.EventNodeExcluded {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	}
}

func (e *excludedNodes) list() []redlock.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// Two Clients share five nodes: one authenticates as a user with every
// documented rule, the other as one without +info|replication (the docs
// say it still locks, blind to failovers). Whichever locks first, each
// then locks free keys at once, turn by turn: a node is never excluded for
// the rights of the Client that marked it (docs/operations.md, "What
// restart safety excludes").
func TestRestartSafety_clientsWithAndWithoutInfoReplicationShareNodes(t *testing.T) {
	t.Parallel()
	for _, restrictedFirst := range []bool{true, false} {
		name := map[bool]string{true: "restricted first", false: "full rights first"}[restrictedFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartT(t, 5)
			nodes, addrs := c.Nodes(), c.Addrs()
			setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "info|replication" }))
			setACLUser(t, nodes, "full", documentedACL())
			exR, exF := &excludedNodes{}, &excludedNodes{}
			restricted := newClient(t, aclPools(t, addrs), redlock.WithObserver(exR))
			full := newClient(t, newPools(t, addrs, poolUser("full")), redlock.WithObserver(exF))
			order := []*redlock.Client{full, restricted}
			if restrictedFirst {
				order = []*redlock.Client{restricted, full}
			}
			for turn := range 6 {
				cl := order[turn%2]
				began := time.Now()
				l, err := cl.TryLock(ctxT(t, quickly), newKey(t), longTTL, redlock.WithFencing())
				require.NoError(t, err, "turn %d: a free key is locked at once", turn)
				t.Logf("turn %d: locked in %v", turn, time.Since(began).Round(time.Microsecond))
				require.NoError(t, l.Unlock(ctxT(t, quickly)))
			}
			require.Empty(t, exR.list(), "no node excluded")
			require.Empty(t, exF.list(), "no node excluded")
		})
	}
}
