package redlock

import (
	"strconv"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// kind is what one kind of lock does its own way: how a failed round of
// it is undone, how a hold of it is extended and released, how its
// fences are read, what observers call it, and how a Handle of it is
// written and restored. A grab (engine.go) and a *Lock carry one, set
// where the lock is asked for; nothing else asks which kind it has.
// Kinds are small values (empty, or one pointer), so that an interface
// holding one does not allocate. Each lives in its own file; kinds below
// lists them.
type kind interface {
	// is is the kind observers and metrics see.
	is() LockKind
	// name is what observers, metrics and errors call the lock on key:
	// the name the caller gave.
	name(key string) string
	// keys are the lock's keys when it has several (their fences are
	// minted in this order); nil for one (the lock's key).
	keys() []string
	// undo is the script and arguments that give token up on a node that
	// may hold it after a failed round on key, but for the choice keep (a
	// semaphore's slot won; -1 for none). plain is the key and token as a
	// plain round (SET NX) sent them, nil for a script's (grab.plain). It
	// takes no *grab: a grab passed to an interface method would be
	// allocated on the heap, for every TryLock.
	undo(c *Client, key, token string, plain []any, keep int) (*pool.Script, []any)
	// fenceAt reads the counter and epoch of key k (of n) from a node's
	// grant of a fenced round.
	fenceAt(reply any, n, k int) (wire.Fence, error)
	// extend is the script and arguments of l's extension for ms.
	extend(l *Lock, ms int64) (*pool.Script, []any)
	// release is the script and arguments of l's release.
	release(l *Lock) (*pool.Script, []any)
	// handle writes into h what a Client needs, beyond the token and
	// the keys, to restore l (Client.RestoreHandle).
	handle(l *Lock, h *Handle)
}

// kindSpec is what the list of kinds says of one: its name, and how a
// Handle of it is restored.
type kindSpec struct {
	name string
	// restore checks h and returns the kind of the lock it describes and
	// the lock's key.
	restore func(c *Client, h *Handle) (kind, string, error)
}

// kinds lists every kind of lock, by LockKind. A new kind is a file with
// its type and one line here.
var kinds = [...]kindSpec{
	KindMutex:     {"mutex", restoreMutex},
	KindMulti:     {"multi", restoreMulti},
	KindSemaphore: {"semaphore", restorePermit},
	KindRWRead:    {"rwlock_read", restoreRead},
	KindRWWrite:   {"rwlock_write", restoreWrite},
	KindElection:  {"election", restoreLeadership},
}

// LockKind is the kind of lock an Event or a Handle concerns: which call
// took it. Its String is what metrics call it (otelredlock's
// redlock.kind).
type LockKind uint8

// The kinds of lock. The zero LockKind is no lock: a node's event.
const (
	// KindMutex: a lock on one key (TryLock, Lock, Do; a multi-key call
	// given one distinct key; Restore).
	KindMutex LockKind = iota + 1
	// KindMulti: a lock on several keys at once (TryLockMulti, LockMulti,
	// DoMulti).
	KindMulti
	// KindSemaphore: a semaphore's permit (Semaphore's TryAcquire,
	// Acquire, Do). Event.Key is the semaphore's name.
	KindSemaphore
	// KindRWRead: a read-write lock's reader (RLock, TryRLock, RDo).
	// Event.Key is the lock's name.
	KindRWRead
	// KindRWWrite: a read-write lock's writer (Lock, TryLock, Do of an
	// RWLock). Event.Key is the lock's name.
	KindRWWrite
	// KindElection: an election's leadership (Campaign, Run). Event.Key
	// is the election's name: a campaign that waits is reported once it
	// leads or gives up, and an Unlock is a resignation.
	KindElection
)

// String returns the kind's name: "mutex", "multi", "semaphore",
// "rwlock_read", "rwlock_write" or "election"; "" for the zero
// LockKind.
func (k LockKind) String() string {
	if int(k) < len(kinds) {
		return kinds[k].name
	}
	return "LockKind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText returns the kind's name (String); it fails for a LockKind
// that is not one of the kinds.
func (k LockKind) MarshalText() ([]byte, error) {
	if k == 0 || int(k) >= len(kinds) {
		return nil, &kindError{k.String()}
	}
	return []byte(kinds[k].name), nil
}

// UnmarshalText reads a kind's name, as MarshalText writes it.
func (k *LockKind) UnmarshalText(b []byte) error {
	for i := 1; i < len(kinds); i++ {
		if kinds[i].name == string(b) {
			*k = LockKind(i)
			return nil
		}
	}
	return &kindError{string(b)}
}

// kindError is the error of a name or number that is no kind of lock.
type kindError struct{ name string }

func (e *kindError) Error() string {
	return "redlock: " + strconv.Quote(e.name) + " is not a kind of lock"
}
