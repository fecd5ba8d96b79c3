package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

var (
	// ErrNotAcquired matches every failed acquisition: the key is held by
	// another owner on too many nodes, too many nodes failed, too little
	// validity was left, or the caller's context ended. The error is a
	// *QuorumError that says which, node by node.
	ErrNotAcquired = errors.New("redlock: lock not acquired")
	// ErrLockLost matches an Extend or Unlock that found fewer than a quorum
	// of nodes still holding our token. The lock may have expired, been
	// taken over, or the nodes may be unreachable; the *QuorumError says
	// which, node by node.
	ErrLockLost = errors.New("redlock: lock lost")
	// ErrReleased is returned by Extend on a lock that this handle has
	// already unlocked, and is the cause of the lock's context after
	// Unlock.
	ErrReleased = errors.New("redlock: lock released")
	// ErrExpired is the cause of a lock's context that ended because the
	// validity ran out (less the safety margin) or the WithMaxHold limit
	// was reached, without the lock having been extended in time.
	ErrExpired = errors.New("redlock: lock expired")
	// ErrClosed is returned by every call on a closed Client (Close),
	// and ends the waits of calls under way. It is pool.ErrClosed, so
	// that a check for either matches.
	ErrClosed = pool.ErrClosed
)

// errEmptyName is the error of every call given an empty key or name:
// a lock's key, a multi-key lock's keys, a semaphore's, read-write lock's
// or election's name.
var errEmptyName = errors.New("redlock: empty name: a lock's key and a semaphore's, read-write lock's or election's name must not be empty")

// errNilContext is returned by calls given a nil context.
var errNilContext = errors.New("redlock: nil context: pass context.Background() or a context with a deadline")

// errNoReply is the Err of a node that had not replied when the node
// timeout passed.
var errNoReply = errors.New("no reply within the node timeout")

// noReply returns the error of node p that had not replied when the node
// timeout passed: errNoReply, with why the pool is not connected when it
// can tell (pool.ConnReporter), so that a node that cannot be dialled says
// so in every round, not only in those that see the dial fail.
func noReply(p pool.Pool) error {
	if cr, ok := p.(pool.ConnReporter); ok {
		if state := cr.ConnErr(); state != nil {
			return fmt.Errorf("%w: %w", errNoReply, state)
		}
	}
	return errNoReply
}

// NodeStatus is what one node did in a quorum round.
type NodeStatus int

const (
	// NodePending: the node had not replied when the round was decided.
	// Its Err is set when the node timeout passed without its reply, and
	// nil when the round was decided without waiting for it.
	NodePending NodeStatus = iota
	// NodeOK: the node did what was asked (acquired, extended or released
	// our key).
	NodeOK
	// NodeRefused: on acquire, the key is held by another owner; on extend
	// and unlock, the key does not hold our token (expired, released or
	// taken by another owner).
	NodeRefused
	// NodeFailed: the node did not answer in time or answered with an
	// error; see NodeResult.Err.
	NodeFailed
)

// NodeResult is one node's part in a quorum round.
type NodeResult struct {
	Addr   string     // the node's address
	Status NodeStatus // what the node did
	Err    error      // the node's error when Status is NodeFailed; for NodePending, set when the node timeout passed
	// On a refused acquisition: how long the holder's key had left on the
	// node, or, with Reserved, how long the node keeps the free key for a
	// waiting Lock call (WithHandoffWindow); -1 when the key has no TTL or
	// the round did not ask (a plain SET NX round: TryLock, and the first
	// round of Lock). Zero otherwise.
	TTL      time.Duration
	Reserved bool // the key was free but kept for a waiting Lock call
	// Latency is how long after the round's start the node replied; zero
	// when it had not replied at the decision, or when the Client has no
	// Observer (it is measured only for them).
	Latency time.Duration
}

// QuorumError is returned when a round did not reach a quorum. It matches
// ErrNotAcquired (acquire) or ErrLockLost (extend, unlock) with errors.Is,
// and also the caller's context error when the context ended the round.
// Node errors are listed in Nodes but are not in the chain, so errors.Is(err,
// context.DeadlineExceeded) speaks only of the caller's context. When the
// context ends a waiting call (Lock, Do, LockMulti, Semaphore.Acquire,
// RWLock), the error is the call's latest refused round, not a round the
// context cut before its nodes answered.
type QuorumError struct {
	Op       Op            // the round: "acquire", "extend", "unlock", or "fence"
	Key      string        // the lock key
	Quorum   int           // nodes needed
	Nodes    []NodeResult  // every node, in the order the Client was given them
	Validity time.Duration // when a quorum agreed but too little validity was left: what was left (may be negative)
	// RetryAfter, on a refused acquisition, is how long until enough of the
	// refusing nodes' keys run out (or their reservations for a waiting
	// Lock lapse) that a quorum could grant, from the TTLs they reported,
	// counting failed and silent nodes as if they could grant: the
	// earliest a new round can succeed unless the holder releases first.
	// 0 when it cannot be told (a key without TTL, or a plain SET NX round,
	// which does not ask: TryLock and Lock's first round) or when the
	// refusals alone do not rule out a quorum.
	RetryAfter time.Duration
	retryKnown bool  // RetryAfter could be told (it may be 0: the keys run out now)
	Err        error // ErrNotAcquired (acquire, fence) or ErrLockLost (extend, unlock)
	Cause      error // the caller's context error, when the context ended the round
}

// Count returns how many nodes ended the round with status s.
func (e *QuorumError) Count(s NodeStatus) int {
	n := 0
	for _, r := range e.Nodes {
		if r.Status == s {
			n++
		}
	}
	return n
}

// Op names the kind of round a QuorumError or a RoundInfo comes from:
// "acquire", "extend", "unlock", "fence" (WithFencing's write-back of the
// fence), or, for RoundInfo only, "handoff" (a lock taken by hand-offs).
type Op string

// The kinds of round.
const (
	OpAcquire Op = "acquire" // an acquisition (TryLock, Lock, and the other kinds' calls)
	OpExtend  Op = "extend"  // Extend, and automatic extension
	OpUnlock  Op = "unlock"  // Unlock
	OpFence   Op = "fence"   // the write-back of a fence (WithFencing)
	OpHandoff Op = "handoff" // RoundInfo only: a lock taken by hand-offs
)

// Busy reports whether an acquisition failed because the key is taken,
// not because the nodes failed: where the nodes told the key's state, it
// is held by another owner (or kept for a waiting Lock), and those
// refusals decided the round, alone (more than N - quorum refused) or,
// with no node granting, together with nodes excluded by restart safety
// or unreachable (no reply in time, a failed connection) that alone would
// not have. Nodes not awaited count for neither; an error reply (a
// refused permission, a read-only replica) never makes a round busy. The
// cases are in docs/algorithm.md.
func (e *QuorumError) Busy() bool {
	if e.Op != OpAcquire {
		return false
	}
	spare := len(e.Nodes) - e.Quorum // the nodes a quorum can do without
	refused, out := e.Count(NodeRefused), e.unasked()
	if refused > spare {
		return true
	}
	return refused > 0 && e.Count(NodeOK) == 0 && out <= spare && refused+out > spare
}

// outOfReach reports whether an acquisition's refusals, with the nodes it
// could not ask (unasked), left too few nodes for a quorum: then no split
// of votes kept the round from winning, however many nodes granted, and a
// refusing key must run out or be released, or an unasked node come
// back, first. That holds with no refusal too: too many nodes out.
func (e *QuorumError) outOfReach() bool {
	return e.Count(NodeRefused)+e.unasked() > len(e.Nodes)-e.Quorum
}

// unasked returns how many nodes the round could not ask: excluded by
// restart safety, or unreachable.
func (e *QuorumError) unasked() int {
	n := 0
	for _, r := range e.Nodes {
		if isUnasked(r) {
			n++
		}
	}
	return n
}

// unaskedNodes returns the nodes that unasked counts, as a mask.
func (e *QuorumError) unaskedNodes() uint64 { return nodeMask(e.Nodes, isUnasked) }

// unreachableNodes returns, as a mask, the nodes that unasked counts
// because the Client could not reach them (no connection): not those
// that restart safety excludes, nor those that timed out.
func (e *QuorumError) unreachableNodes() uint64 {
	return nodeMask(e.Nodes, func(r NodeResult) bool {
		return r.Status == NodeFailed && notAsked(r.Err) && !notCounted(r.Err)
	})
}

// nodeMask returns the nodes of a round whose outcomes are nodes that
// keep says, as a mask (bit i for node i; nodes past 64 share bits,
// nodeBit).
func nodeMask(nodes []NodeResult, keep func(NodeResult) bool) uint64 {
	var m uint64
	for i, r := range nodes {
		if keep(r) {
			m |= nodeBit(i)
		}
	}
	return m
}

// isRefused reports a node that refused a round: it holds another's key.
func isRefused(r NodeResult) bool { return r.Status == NodeRefused }

// isUnasked reports whether r is a node the round could not ask.
func isUnasked(r NodeResult) bool {
	return r.Status == NodePending && r.Err != nil || r.Status == NodeFailed && notAsked(r.Err)
}

// notAsked reports whether a node's command failed with err before the
// node could judge the key: restart safety does not count the node, or
// the node could not be reached (no reply in time, a connection refused
// or broken, now or at its last dial). An error reply, a reply that could
// not be read, or a failed handshake is an answer: the node is there, but
// not as configured.
func notAsked(err error) bool {
	switch {
	case notCounted(err):
		return true
	case replied(err):
		return false
	case errors.Is(err, errNoReply), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Error lists the outcome on every node. It never contains the token.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: key %q: %d of %d nodes", e.Err, e.Key, e.Count(NodeOK), len(e.Nodes))
	fmt.Fprintf(&b, " (quorum %d)", e.Quorum)
	if e.Cause != nil {
		fmt.Fprintf(&b, ", stopped by %v", e.Cause)
	}
	if e.Count(NodeOK) >= e.Quorum && e.Cause == nil {
		fmt.Fprintf(&b, ", validity %v left is too little", e.Validity)
	}
	b.WriteString(": ")
	for i, r := range e.Nodes {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r.Addr)
		b.WriteByte(' ')
		b.WriteString(e.describe(r))
	}
	return b.String()
}

// doneByOp says what a node that answered NodeOK did, by round.
var doneByOp = map[Op]string{OpAcquire: "acquired", OpExtend: "extended", OpUnlock: "released", OpFence: "stored the fence"}

func (e *QuorumError) describe(r NodeResult) string {
	switch r.Status {
	case NodeOK:
		if r.Err != nil {
			return doneByOp[e.Op] + ", but " + r.Err.Error()
		}
		return doneByOp[e.Op]
	case NodeRefused:
		switch {
		case e.Op == OpFence:
			return "refused the fence: its counter is already as high"
		case e.Op != OpAcquire:
			return "not held by us"
		case r.Reserved:
			return fmt.Sprintf("kept for a waiting Lock (%v left)", r.TTL)
		case r.TTL > 0:
			return fmt.Sprintf("held by another owner (%v left)", r.TTL)
		}
		return "held by another owner"
	case NodeFailed:
		return "failed: " + r.Err.Error()
	default:
		if r.Err != nil {
			return r.Err.Error() // errNoReply
		}
		return "not awaited (the outcome was decided without it)"
	}
}

// Unwrap returns the sentinel (ErrNotAcquired or ErrLockLost) and, when the
// caller's context ended the round, its error.
func (e *QuorumError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// Classifiers of the errors a round meets.

// asRefusal returns err as a round that did not reach a quorum, which
// waiting may overcome; nil for anything else.
func asRefusal(err error) *QuorumError {
	if err == nil {
		return nil
	}
	var qe *QuorumError
	if errors.As(err, &qe) && qe.Cause == nil {
		return qe
	}
	return nil
}

// answeredWithError reports whether a node of the round answered with an
// error reply.
func answeredWithError(qe *QuorumError) bool {
	for _, n := range qe.Nodes {
		if n.Status == NodeFailed && replied(n.Err) {
			return true
		}
	}
	return false
}

// maySent reports whether a command that failed with err may still have
// reached the node: false when the pool says it never sent it (no
// connection, a full queue). A reply that restart safety did not count
// reached the node, whatever the error of the check it carries says (a
// check that could not dial, say).
func maySent(err error) bool {
	if answered(err) {
		return true
	}
	var ne *pool.NodeError
	return !errors.As(err, &ne) || ne.Op != "dial" && ne.Op != "queue"
}

// answered reports whether a node whose command failed with err read the
// command and answered it: an error reply, or a reply restart safety did
// not count.
func answered(err error) bool {
	return replied(err) || notCounted(err)
}

// replied reports whether err is the node's own error reply.
func replied(err error) bool {
	var ne *pool.NodeError
	if errors.As(err, &ne) {
		return ne.Replied()
	}
	var re pool.ReplyError
	return errors.As(err, &re)
}

// Permission refusals. A node refuses a command, a key or a channel that
// the user's ACL rules leave out, and the servers word it in two ways:
//
//	sent by the client
//	  Redis 7.0: NOPERM this user has no permissions to run the 'del' command
//	             NOPERM this user has no permissions to access one of the keys used as arguments
//	  Valkey 8:  NOPERM User locker has no permissions to run the 'del' command
//	             NOPERM No permissions to access a key
//	called by a script
//	  Redis 7.0: ERR The user executing the script can't run this command or subcommand script: <sha1>, on @user_script:<line>.
//	             ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: ...
//	  Valkey 8:  ERR ACL failure in script: User locker has no permissions to run the 'del' command script: <sha1>, on @user_script:<line>.
//	             ERR ACL failure in script: No permissions to access a key script: ...
//
// (channels as keys: "... one of the channels ...", "can't publish to the
// channel ...", "a channel"). asDenial reads them all; explainDenied turns
// them into one error, the same whichever server refused.

var (
	deniedScriptRE = regexp.MustCompile(`^ERR (The user executing the script can't|ACL failure in script: )`)
	deniedCmdRE    = regexp.MustCompile(`(?i)no permissions to run the '([^']+)' command|can't run this command`)
	deniedWhereRE  = regexp.MustCompile(`script: ([0-9a-f]{40}), on @user_script:(\d+)`)
	deniedKeyRE    = regexp.MustCompile(`(?i)\bkeys?\b`)
	deniedChanRE   = regexp.MustCompile(`(?i)\bchannels?\b`)
)

// denial is what a node's refusal for lack of permission says.
type denial struct {
	object string // what the rules leave out: "command", "key" or "channel"
	cmd    string // the refused command in upper case ("GET", "CONFIG|GET"); "" when the node does not say
	script bool   // a script called the command
}

// asDenial reads a node's error reply msg as a refusal for lack of
// permission; ok is false for any other reply. A command refused inside
// one of the scripts is named from the script's line (wire.Called), which
// every server reports, Redis 7.0 without the command's name.
func asDenial(msg string) (d denial, ok bool) {
	d.script = deniedScriptRE.MatchString(msg)
	if !d.script && !strings.HasPrefix(msg, "NOPERM ") {
		return denial{}, false
	}
	switch m := deniedCmdRE.FindStringSubmatch(msg); {
	case m != nil:
		d.object, d.cmd = "command", strings.ToUpper(m[1])
	case deniedKeyRE.MatchString(msg):
		d.object = "key"
	case deniedChanRE.MatchString(msg):
		d.object = "channel"
	default:
		return denial{}, false
	}
	if m := deniedWhereRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[2])
		if c, ok := wire.Called(m[1], n); ok {
			d.cmd = c
		}
	}
	return d, true
}

// explainDenied returns err as a *deniedError, in the same *pool.NodeError
// when there is one, when err is a node's refusal for lack of permission;
// err otherwise.
func explainDenied(err error) error {
	var re pool.ReplyError
	if err == nil || !errors.As(err, &re) {
		return err
	}
	d, ok := asDenial(string(re))
	if !ok {
		return err
	}
	de := &deniedError{denial: d, cause: re}
	var ne *pool.NodeError
	if errors.As(err, &ne) {
		return &pool.NodeError{Addr: ne.Addr, Op: ne.Op, Err: de}
	}
	return de
}

// deniedError is a node's refusal of a command, a key or a channel for
// lack of permission, worded alike for every server; the node's own
// reply follows and stays in the chain.
type deniedError struct {
	denial
	cause pool.ReplyError
}

func (e *deniedError) Error() string {
	var b strings.Builder
	b.WriteString("NOPERM: ")
	cmd := e.cmd
	if cmd == "" {
		cmd = "a command"
	}
	switch e.object {
	case "command":
		b.WriteString("the user may not run " + cmd)
	default:
		b.WriteString("a " + e.object)
		if e.cmd != "" {
			b.WriteString(" of " + e.cmd)
		}
		b.WriteString(" is outside the user's " + e.object + " patterns")
	}
	b.WriteString(" (")
	if e.script {
		b.WriteString("called by the script; ")
	}
	b.WriteString("docs/operations.md lists the ACL): " + string(e.cause))
	return b.String()
}

func (e *deniedError) Unwrap() error { return e.cause }
