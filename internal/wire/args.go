package wire

import "github.com/quorumlock/redlock/internal/keyslot"

// The arguments of each script: its keys, then its values, in the order
// of the named locals at the top of its source. A script whose key count
// goes with each call (-1) takes the count first.

// Queue is the queue's fixed arguments of one Client, in milliseconds:
// the reservation window, and the slack, how long an entry outlives the
// time its waiter was told to come back; life, an entry's life after a
// refused round, is the refresh (the longest a waiter sleeps between
// rounds) plus the slack. The window and life are boxed once.
type Queue struct {
	window, life any
	slack        int64
}

// NewQueue returns the queue arguments for the given milliseconds.
func NewQueue(windowMs, slackMs, refreshMs int64) Queue {
	return Queue{window: windowMs, life: refreshMs + slackMs, slack: slackMs}
}

// Waiter is what the acquisition script learns of a waiting Lock call;
// the zero value is a caller that does not wait (TryLock).
type Waiter struct {
	ID      string // its entry in the key's queue: "<client id>.<n>"
	Since   int64  // when its wait began, µs of wall-clock time: its place
	Waited  int64  // how long it has waited, µs on the monotonic clock
	Round   int    // the number of this round, from 1
	Handoff string // its hand-off token; "" when it takes no hand-off
}

// AcquireArgs are the acquisition script's key count, keys and arguments
// for round w (the zero Waiter for a caller that does not wait) that sets
// token for ms; epoch is a new random epoch for a fenced acquisition, ""
// for none. An entry kept after a round that took the key lasts the
// slack, at most half of ms.
func (q Queue) AcquireArgs(key, token string, ms int64, w Waiter, epoch string) []any {
	nkeys := 2
	if epoch != "" {
		nkeys = 4
	}
	args := make([]any, 0, 16)
	args = append(args, nkeys, key, WaitersKey(key))
	if epoch != "" {
		args = append(args, FenceKey(key), EpochKey(keyslot.Slot(key)))
	}
	args = append(args, token, ms, w.ID, w.Since, w.Waited, second(w.Since, w.Waited), w.Round, w.Handoff, q.window, q.life, min(q.slack, ms/2))
	if epoch != "" {
		args = append(args, epoch)
	}
	return args
}

// second is a waiting call's Client's wall-clock time when it sends a
// round, in whole seconds: when the wait began and how long it has
// waited, in µs. A node whose clock reads another second checks the
// call's place (place.lua).
func second(since, waited int64) int64 { return (since + waited) / 1_000_000 }

// ReleaseArgs are the release script's keys and arguments: key gives up
// owned (a token, or a waiting call's reservation) and, when handoff (a
// waiting call's hand-off token) is not "", any value of that call's:
// its rounds' tokens ("<handoff>/<round>") and the hand-offs to it
// ("<handoff>/h<round>"), after the round that won the lock or an
// earlier one. waited is the queue id that leaves the queue ("" for
// none).
func (q Queue) ReleaseArgs(key, owned, waited, handoff string) []any {
	if handoff != "" {
		handoff += "/"
	}
	return []any{key, WaitersKey(key), owned, waited, handoff, q.window}
}

// ForceArgs are the forced release's keys and arguments: key is given up
// whatever it holds.
func (q Queue) ForceArgs(key string) []any {
	return []any{key, WaitersKey(key), q.window}
}

// InspectArgs are the inspection script's keys: key, its queue, its
// fence counter and its slot's epoch (the floor's name is built from it).
func InspectArgs(key string) []any {
	return []any{key, WaitersKey(key), FenceKey(key), EpochKey(keyslot.Slot(key))}
}

// ReleaseFreeArgs are the short release's keys and arguments: key gives
// up token. They are any so that a plain round's boxed key and token
// serve as they are.
func ReleaseFreeArgs(key, token any) []any {
	return []any{key, token, ReleasedPrefix}
}

// SetArgs are the arguments of SET key token NX PX ms GET, the plain
// acquisition that needs no script: nil when it took the key, the
// holder's value when it did not (Redis 7 and Valkey take NX with GET).
func SetArgs(key, token string, ms int64) []any {
	return []any{key, token, "NX", "PX", ms, "GET"}
}

// ExtendArgs are the extension script's keys and arguments: key, if it
// holds token, or also when not "", lives ms from now. For a lock that a
// round of a waiting call won, also is what a hand-off after that same
// round sets: no later round of the call exists to replace it. Not a
// hand-off after an earlier round, which a late round of the call may
// still replace (and the release that round owes then give away), nor
// the token of another round, which failed.
func ExtendArgs(key, token string, ms int64, also string) []any {
	if also != "" {
		return []any{key, token, ms, also}
	}
	return []any{key, token, ms}
}

// FenceStoreArgs are the fence write-back's keys and arguments: key's
// counter takes fence if it is above it, and lives FenceTTL of the lock's
// ttl (ms); key's slot's floor keeps the largest fence.
func FenceStoreArgs(key string, fence uint64, ttl int64) []any {
	return []any{FenceKey(key), FloorKey(keyslot.Slot(key)), fence, FenceTTL(ttl)}
}

// NodeCheckArgs are the restart check's keys and arguments: mark is the
// marker to write (MarkerOf), if it names the node's process and
// lineage, "" for none; born, written with a mark that is the node's
// first, lists the shards of a new deployment (BornOf; "" for none); how
// is MarkKept for a node marked at once because it kept its data, ""
// otherwise.
func NodeCheckArgs(mark, born, how string) []any {
	return checkArgs(MarkerKey, mark, born, how)
}

// ShardCheckArgs are the restart check's keys and arguments for the shard
// of a cluster node that serves slot (ShardMarkerKey); mark as in
// NodeCheckArgs.
func ShardCheckArgs(slot uint16, mark string) []any {
	return checkArgs(ShardMarkerKey(slot), mark, "", "")
}

func checkArgs(marker, mark, born, how string) []any {
	return []any{marker, FactKey(marker, FactMark), FactKey(marker, FactSeen), FactKey(marker, FactBorn), mark, born, how}
}

// MultiAcquireArgs are the multi-key acquisition's key count, keys and
// arguments: keys take token for ms; with fencing (epoch is not "") their
// fence counters and their slots' epochs come after them.
func MultiAcquireArgs(keys []string, token string, ms int64, epoch string) []any {
	nkeys := len(keys)
	if epoch != "" {
		nkeys *= 3
	}
	args := make([]any, 0, nkeys+5)
	args = append(args, nkeys)
	for _, k := range keys {
		args = append(args, k)
	}
	if epoch != "" {
		for _, k := range keys {
			args = append(args, FenceKey(k))
		}
		for _, k := range keys {
			args = append(args, EpochKey(keyslot.Slot(k)))
		}
	}
	return append(args, token, ms, len(keys), epoch)
}

// MultiExtendArgs are the multi-key extension's key count, keys and
// arguments: every key that holds token lives ms from now, or none.
func MultiExtendArgs(keys []string, token string, ms int64) []any {
	return multiKeys(keys, token, ms)
}

// MultiReleaseArgs are the multi-key release's key count, keys and
// arguments: every key that holds token is given up and announced.
func MultiReleaseArgs(keys []string, token string) []any {
	return multiKeys(keys, token, ReleasedPrefix)
}

// multiKeys is the key count and keys, then more.
func multiKeys(keys []string, more ...any) []any {
	args := make([]any, 0, len(keys)+1+len(more))
	args = append(args, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return append(args, more...)
}

// SemKeys are the key count and keys of a semaphore of permits slots:
// the slots, its size key and its queue's two keys; fenced, also each
// slot's fence counter and the node's epoch key for the name's hash slot.
func SemKeys(name string, permits int, fenced bool) []any {
	args := make([]any, 0, 2*permits+5)
	args = append(args, permits+3)
	for i := range permits {
		args = append(args, PermitKey(name, i))
	}
	args = append(args, PermitsKey(name), PermitWaitersKey(name), PermitDueKey(name))
	if !fenced {
		return args
	}
	for i := range permits {
		args = append(args, FenceKey(PermitKey(name, i)))
	}
	args[0] = 2*permits + 4
	return append(args, EpochKey(keyslot.Slot(name)))
}

// Wait is a waiting call's place in a queue ordered by priority (a
// semaphore's Acquire, a read-write lock's waiting writer), as one round
// tells it. A node whose clock is more than a second off the Client's
// places a call new on it by its own clock less Waited, as it does a
// waiting Lock call (Waiter).
type Wait struct {
	ID       string // the call's id, "<client id>.<n>"; "" for a call that does not wait
	Priority int64  // when the call began to wait (µs of its Client's wall clock): smaller goes first
	Waited   int64  // how long it has waited when the round is sent, µs on its Client's monotonic clock
	LifeMs   int64  // how long its place lasts on a node unless it asks again
}

// SemAcquireArgs are the acquisition's key count, keys and arguments for
// a semaphore of permits slots: a free slot takes token for ms, slot prefer first (-1 for
// none), for the waiting call w (zero for none); epoch is the fencing
// epoch ("" without fencing, and then keys must be unfenced). keys is
// SemKeys' result, shared by the rounds of one call.
func SemAcquireArgs(keys []any, permits int, token string, ms int64, prefer int, w Wait, epoch string) []any {
	args := append(keys[:len(keys):len(keys)], token, ms, prefer, permits)
	if w.ID == "" && epoch == "" {
		return args // the script reads the rest as none
	}
	return append(args, w.ID, w.Priority, w.Waited, second(w.Priority, w.Waited), w.LifeMs, epoch)
}

// SemReleaseArgs are the release's key count, keys and arguments for a
// semaphore of permits slots: every slot but keep (-1 for none) that holds token is given
// up and announced on the semaphore's release channel, and the waiting
// call waiter ("" for none) leaves the queue. keys is SemKeys' result.
func SemReleaseArgs(name string, keys []any, permits int, token string, keep int, waiter string) []any {
	args := make([]any, 0, permits+7)
	args = append(args, permits+2)
	args = append(args, keys[1:1+permits]...)
	args = append(args, PermitWaitersKey(name), PermitDueKey(name))
	return append(args, token, ReleaseChannel(name), keep, waiter)
}

// SemReleaseSlotArgs are the release's key count, keys and arguments for
// the one slot key of the semaphore name that a permit holds with token:
// Unlock knows the slot its permit is on.
func SemReleaseSlotArgs(name, slot, token string) []any {
	return []any{3, slot, PermitWaitersKey(name), PermitDueKey(name), token, ReleaseChannel(name), -1, ""}
}

// rwKeys returns the read-write lock's 8 keys (RWKeys), boxed, with room
// for the arguments.
func rwKeys(keys *[8]string) []any {
	args := make([]any, 8, 16)
	for i, k := range keys {
		args[i] = k
	}
	return args
}

// RWReadArgs are a reader's keys and arguments: token joins the readers
// of the lock whose keys are keys (RWKeys) for ms; a refused waiting
// reader (waiter, its id, not "") keeps its place for lifeMs.
func RWReadArgs(keys *[8]string, token string, ms int64, waiter string, lifeMs int64) []any {
	return append(rwKeys(keys), token, ms, RWMarker, waiter, lifeMs)
}

// RWWriteArgs are a writer's keys and arguments: token takes the lock for
// ms; a waiting writer (waiter, its id, not "") keeps its place in the
// writers' queue for lifeMs, by priority (when it began to wait, µs of
// its Client's wall clock) unless the node places it by its own clock
// less waited (µs: place.lua).
func RWWriteArgs(keys *[8]string, token string, ms, lifeMs int64, waiter string, priority, waited int64) []any {
	return append(rwKeys(keys), token, ms, lifeMs, waiter, RWMarker, priority, waited, second(priority, waited))
}

// RWExtendArgs are the extension's keys and arguments: the writer or
// reader token lives ms from now.
func RWExtendArgs(keys *[8]string, token string, ms int64) []any {
	return append(rwKeys(keys), token, ms, RWMarker)
}

// RWReleaseArgs are the release's keys and arguments: the writer or
// reader token of the lock name gives up its hold, announced on name's
// release channel to those who can use it, and the place of the waiting
// call that took it, waiter ("" for none), goes with it. A writer's
// release begins a readers' turn of at most turnMs.
func RWReleaseArgs(name string, keys *[8]string, token, waiter string, turnMs int64) []any {
	return append(rwKeys(keys), token, ReleaseChannel(name), RWMarker, waiter, turnMs, ForReaders, "1")
}

// RWLeaveArgs are the release's keys and arguments for the waiting call
// waiter of the lock name, which takes its place away: announced on
// name's release channel for anyone, unless the call took the lock (held),
// when the place it frees lets no one in.
func RWLeaveArgs(name string, keys *[8]string, waiter string, held bool) []any {
	announce := ""
	if !held {
		announce = "1"
	}
	return append(rwKeys(keys), "", ReleaseChannel(name), RWMarker, waiter, 0, ForReaders, announce)
}

// ForReaders is the To of a read-write lock's release that only waiting
// readers can use: a writer's release that began the readers' turn. The
// last live reader's release while writers wait names the first of them;
// a reader's release that leaves other live readers in is not announced,
// since it lets no one in. ForReaders cannot be a waiter's id (Client ID
// "." random), nor the empty To of a release for anyone.
const ForReaders = "*readers"

// LeaderWriteArgs are the leader record's keys and arguments: the record
// of the election name takes token, value, term and the Client ID cid,
// while the election key holds token.
func LeaderWriteArgs(name, token, value string, term uint64, cid string) []any {
	return []any{ElectionKey(name), LeaderKey(name), token, value, term, cid, LeaderChannel(name)}
}

// LeaderExtendArgs are the leader extension's keys and arguments: the
// election key of name, if it holds token, lives ms from now, and there
// the record takes token, value, term and the Client ID cid unless it
// already names token.
func LeaderExtendArgs(name, token string, ms int64, value string, term uint64, cid string) []any {
	return []any{ElectionKey(name), LeaderKey(name), token, ms, value, term, cid, LeaderChannel(name)}
}

// LeaderReadArgs are the leader read's keys: the election name's key and
// record.
func LeaderReadArgs(name string) []any {
	return []any{ElectionKey(name), LeaderKey(name)}
}
