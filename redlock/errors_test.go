package redlock

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// Node results of the Busy cases, on five nodes (quorum 3).
var (
	nGranted     = NodeResult{Status: NodeOK}
	nHeld        = NodeResult{Status: NodeRefused, TTL: 5 * time.Second}
	nNotAwaited  = NodeResult{Status: NodePending}
	nTimedOut    = NodeResult{Status: NodePending, Err: errNoReply}
	nRestarted   = NodeResult{Status: NodeFailed, Err: &restartedError{left: time.Minute, why: "a new run id"}}
	nUnchecked   = NodeResult{Status: NodeFailed, Err: &uncheckedError{last: &pool.NodeError{Op: "EVALSHA", Err: pool.ReplyError("NOPERM no INFO")}}}
	nRefusedDial = NodeResult{Status: NodeFailed, Err: &pool.NodeError{Op: "dial", Err: fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)}}
	nDownGarbled = NodeResult{Status: NodeFailed, Err: &pool.NodeError{Op: "dial", Err: errors.New("node down: unexpected response line")}}
	nReset       = NodeResult{Status: NodeFailed, Err: &pool.NodeError{Op: "SET", Err: fmt.Errorf("read: %w", syscall.ECONNRESET)}}
	nNoPerm      = NodeResult{Status: NodeFailed, Err: &pool.NodeError{Op: "EVALSHA", Err: pool.ReplyError("NOPERM this user has no permissions to run the 'hget' command")}}
	nGarbled     = NodeResult{Status: NodeFailed, Err: &pool.NodeError{Op: "SET", Err: errors.New("unexpected response line")}}
)

func TestQuorumError_BusyIsTheKeyHeldWhereKnownDecidingTheRound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []NodeResult
		busy  bool
	}{
		{"held everywhere", []NodeResult{nHeld, nHeld, nHeld, nHeld, nHeld}, true},
		{"refusals alone decide, though two granted", []NodeResult{nGranted, nGranted, nHeld, nHeld, nHeld}, true},
		{"refusals alone decide, the rest not awaited", []NodeResult{nHeld, nHeld, nHeld, nNotAwaited, nNotAwaited}, true},
		{"a restarted node and two refusals, the rest not awaited",
			[]NodeResult{nRestarted, nNotAwaited, nNotAwaited, nHeld, nHeld}, true},
		{"a node not checked yet and two refusals", []NodeResult{nUnchecked, nHeld, nHeld, nNotAwaited, nNotAwaited}, true},
		{"a timed-out node and two refusals", []NodeResult{nTimedOut, nHeld, nHeld, nNotAwaited, nNotAwaited}, true},
		{"an unreachable node and two refusals", []NodeResult{nRefusedDial, nHeld, nHeld, nNotAwaited, nNotAwaited}, true},
		{"a broken connection and two refusals", []NodeResult{nReset, nHeld, nHeld, nNotAwaited, nNotAwaited}, true},
		{"one refusal and two unreachable nodes", []NodeResult{nRestarted, nTimedOut, nHeld, nNotAwaited, nNotAwaited}, true},

		{"the excluded nodes alone decide", []NodeResult{nRestarted, nRestarted, nRestarted, nHeld, nHeld}, false},
		{"every node unreachable", []NodeResult{nTimedOut, nRefusedDial, nReset, nTimedOut, nTimedOut}, false},
		{"a node granted: a split", []NodeResult{nGranted, nRestarted, nNotAwaited, nHeld, nHeld}, false},
		{"an error reply was needed", []NodeResult{nNoPerm, nNotAwaited, nNotAwaited, nHeld, nHeld}, false},
		{"a reply that could not be read was needed", []NodeResult{nGarbled, nNotAwaited, nNotAwaited, nHeld, nHeld}, false},
		{"a node down after a reply that could not be read", []NodeResult{nDownGarbled, nNotAwaited, nNotAwaited, nHeld, nHeld}, false},
		{"cut by the context before a decision", []NodeResult{nHeld, nHeld, nNotAwaited, nNotAwaited, nNotAwaited}, false},
		{"no refusal", []NodeResult{nNoPerm, nNoPerm, nNoPerm, nNotAwaited, nNotAwaited}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qe := &QuorumError{Op: OpAcquire, Key: "k", Quorum: 3, Nodes: tc.nodes, Err: ErrNotAcquired}
			require.Equal(t, tc.busy, qe.Busy(), "%v", qe)
			qe.Op = OpExtend
			require.False(t, qe.Busy(), "only an acquisition is busy")
		})
	}
}

// fixedRetry is a back-off that always waits d.
type fixedRetry time.Duration

func (f fixedRetry) delay(int) time.Duration { return time.Duration(f) }
func (f fixedRetry) validate() error         { return nil }

// A waiting call sleeps after a busy round until the holder's keys run
// out (or a release is heard), as after any round the key is nHeld in; a
// round that failed for the nodes is paced by the back-off, and so is one
// whose refusals and unreachable nodes left a quorum out of reach,
// whatever the nodes that granted: no split.
func TestPacing_aBusyRoundWaitsForTheHoldersKeys(t *testing.T) {
	c, _, _ := newFakeClient(t, 5) // refresh interval: 5 fake minutes
	const backoff = time.Hour
	for _, tc := range []struct {
		name     string
		nodes    []NodeResult
		retry    time.Duration // RetryAfter, as the round reports it
		min, max time.Duration
	}{
		{"held on every node", []NodeResult{nHeld, nHeld, nHeld, nHeld, nHeld}, 5 * time.Second, 5 * time.Second, 5*time.Second + expiryJitter},
		{"held on two nodes, one restarted", []NodeResult{nRestarted, nNotAwaited, nNotAwaited, nHeld, nHeld}, 0,
			5 * time.Second, 5*time.Second + expiryJitter},
		{"held on two nodes, one unreachable", []NodeResult{nHeld, nTimedOut, nHeld, nNotAwaited, nNotAwaited}, 0,
			5 * time.Second, 5*time.Second + expiryJitter},
		{"an error reply", []NodeResult{nNoPerm, nNotAwaited, nNotAwaited, nHeld, nHeld}, 0, backoff, backoff},
		{"granted on two, held on two, one restarted: out of reach, no split",
			[]NodeResult{nGranted, nGranted, nHeld, nHeld, nRestarted}, 0, backoff, backoff},
		{"unreachable", []NodeResult{nTimedOut, nTimedOut, nTimedOut, nHeld, nNotAwaited}, 0, backoff, backoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qe := &QuorumError{Op: OpAcquire, Quorum: 3, Nodes: tc.nodes, Err: ErrNotAcquired}
			qe.RetryAfter, qe.retryKnown = retryAfter(tc.nodes, 3)
			require.Equal(t, tc.retry, qe.RetryAfter)
			p := pacing{c: c, retry: fixedRetry(backoff)}
			d, split := p.next(qe, 1, true)
			require.False(t, split)
			require.GreaterOrEqual(t, d, tc.min)
			require.LessOrEqual(t, d, tc.max)
		})
	}
}

// A round that some nodes granted is a split vote, asked again after a
// short random pause, unless its refusals left a quorum out of reach: the
// nodes neither refusing nor out (excluded, unreachable) could not have
// made one. The same holds for a round with no refusal that could not ask
// too many nodes: asked again every few milliseconds, it would cost the
// nodes that answer a grant and a release each time while a quorum is
// out.
func TestPacing_aSplitIsARoundThatHadAQuorumWithinReach(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	for _, tc := range []struct {
		name  string
		nodes []NodeResult
		split bool
	}{
		{"granted on two, held on one, one restarted: a quorum was within reach",
			[]NodeResult{nGranted, nGranted, nHeld, nRestarted, nNotAwaited}, true},
		{"granted on two, held on two, the fifth not awaited", []NodeResult{nGranted, nGranted, nHeld, nHeld, nNotAwaited}, true},
		{"granted on two, held on two, one restarted", []NodeResult{nGranted, nGranted, nHeld, nHeld, nRestarted}, false},
		{"granted on two, held on one, two unreachable", []NodeResult{nGranted, nGranted, nHeld, nTimedOut, nReset}, false},
		{"granted on two, three unreachable, no refusal", []NodeResult{nGranted, nGranted, nTimedOut, nRefusedDial, nReset}, false},
		{"granted on two, two unreachable, no refusal: a quorum was within reach",
			[]NodeResult{nGranted, nGranted, nTimedOut, nReset, nNotAwaited}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qe := &QuorumError{Op: OpAcquire, Quorum: 3, Nodes: tc.nodes, Err: ErrNotAcquired}
			p := pacing{c: c, retry: fixedRetry(time.Hour)}
			d, split := p.next(qe, 1, true)
			require.Equal(t, tc.split, split)
			if split {
				require.LessOrEqual(t, d, splitMin)
			} else {
				require.Equal(t, time.Hour, d, "paced by the back-off")
			}
		})
	}
}

// The round on fake nodes: one node excluded as nRestarted, two
// nHeld by another owner, two not awaited: the key is busy.
func TestTryLock_isBusyWhenTheKeyIsHeldWhereKnownAndARestartedNodeDecides(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	nodes[0].failWith(&restartedError{left: time.Minute, why: "it came back under a new run id"})
	open1, open2 := nodes[1].hold(), nodes[2].hold()
	defer open2()
	defer open1()
	for _, n := range nodes[3:] {
		n.set("k", "foreign")
	}
	// The round as decided, with nodes 1 and 2 not awaited (a refused
	// TryLock goes on to wait for them).
	r, err := c.run(context.Background(), request{cmd: "SET", args: wire.SetArgs("k", "tok", ttl.Milliseconds()), status: setStatus})
	require.NoError(t, err)
	err = c.quorumError(OpAcquire, "k", r, ErrNotAcquired, 0)
	qe := quorumError(t, err)
	require.Equal(t, NodeFailed, qe.Nodes[0].Status, "%v", err)
	require.Equal(t, 2, qe.Count(NodeRefused), "%v", err)
	require.Equal(t, 2, qe.Count(NodePending), "%v", err)
	require.True(t, qe.Busy(), "%v", err)
}

// A round that could not ask a node whose pub/sub connection is back
// (its command connection dials with a back-off of its own) sleeps no
// longer than lagRetry says, 10ms doubling to 250ms, whatever the back-off
// or the holder's keys would have it sleep; the count starts again once
// no such node is left.
func TestPacing_aRoundThatCouldNotAskANodeThatIsBackIsAskedAgainSoon(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	p := pacing{c: c, retry: fixedRetry(time.Hour)}
	for k, ceiling := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
		d := p.lag(time.Hour, true)
		require.LessOrEqual(t, d, ceiling, "round %d", k+1)
		require.GreaterOrEqual(t, d, ceiling/2, "round %d", k+1)
	}
	for range 10 {
		require.LessOrEqual(t, p.lag(time.Hour, true), defaultRetryMax)
	}
	require.Equal(t, time.Hour, p.lag(time.Hour, false), "no node lagging: as pacing.next said")
	require.LessOrEqual(t, p.lag(time.Hour, true), 10*time.Millisecond, "counted afresh")
	require.Equal(t, time.Millisecond, p.lag(time.Millisecond, true), "never longer than pacing.next said")
}
