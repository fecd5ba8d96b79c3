package wire

import (
	"strconv"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// The names of everything a Client keeps on the nodes or announces
// through them, all derived here. Most scripts build none of them: the
// Client passes each key in KEYS and each channel or value in ARGV. The
// queue's scripts (queue.lua and the scripts it starts) run on every
// hand-off of a hot key, where each argument sent costs the node more
// than building the name in the script, so they build these:
// a waiter's entry (EntryKey) from the queue's key and the waiter's id,
// the head's hand-off channel and the release channel from the lock key,
// with ReservedPrefix, HandoffPrefix, ReleasedPrefix and RWMarker written
// in their source (a test checks that the two agree). The short release
// completes the release channel from the prefix it is sent.
// docs/operations.md ("Keys and channels") has the table of them all:
// type, contents, writer.
//
// Every key a script touches with a lock key is in the lock key's Redis
// Cluster hash slot, so that a node may be a cluster: the helper keys are
// named after the lock key's hash tag (keyslot.Helper).

// WaitersKey is the queue of the Lock calls that wait for key: a sorted
// set of waiter ids by priority (queue.lua).
func WaitersKey(key string) string { return keyslot.Helper(key, "queue") }

// EntryKey is the queue entry of the waiter id on key: a string that
// expires when the waiter is due back and is not, holding its latest
// round, TTL and hand-off token (queue.lua). The scripts build it from
// WaitersKey, which ends with key's hash tag when it has one: the entry
// is in key's hash slot.
func EntryKey(key, id string) string { return WaitersKey(key) + ":" + id }

// FenceKey is key's fence counter (WithFencing): the last fence written
// back for key. It expires FenceTTL after that write-back; FloorKey keeps
// what it held (fence_store.lua).
func FenceKey(key string) string { return keyslot.Helper(key, "fence") }

// FloorKey is the fence floor of a hash slot: the largest fence written
// back for any key of the slot, without a TTL. A key's fence is at least
// its slot's floor (fence_read.lua), so that a node keeps one floor per
// slot rather than a counter per key ever fenced. The acquisition
// scripts build it from EpochKey (a test checks the two agree), which it
// shares a slot and an ACL pattern with.
func FloorKey(slot uint16) string { return EpochKey(slot) + ":fence" }

// FenceTTL is how long (ms) a key's fence counter outlives the
// write-back of a lock whose TTL is ttl ms: twice the TTL, and at least a
// second, past any write-back of a lock that overlapped it (a write-back
// counts only within its lock's validity).
func FenceTTL(ttl int64) int64 { return max(2*ttl, 1000) }

// EpochKey holds the node's epoch for a hash slot: a random value the
// first fenced acquisition of a key in the slot creates (SET NX, no TTL).
// A node that lost its data comes back without it, so a new value tells
// the Client that the node's fence counters are gone (docs/fencing.md).
// One per slot rather than one per node, so that the acquisition script
// reaches it on a cluster.
func EpochKey(slot uint16) string { return "redlock:epoch:{" + keyslot.Tag(slot) + "}" }

// MarkerKey holds restart safety's marker of the node (docs/safety.md):
// the run id of the process it counts (Marker lists the forms every
// version reads, ParseMarker reads them). FactKey names the keys beside
// it. None has a TTL.
const MarkerKey = "redlock:node"

// The facts kept beside a marker, each in a key of its own (FactKey).
const (
	FactMark = "mark" // "<run id> <replication id>" of the last mark
	FactSeen = "seen" // a sighting of a dataset that came from elsewhere (Marker)
	FactBorn = "born" // the shards that ran when the deployment was new (BornOf)
)

// FactKey names the key that holds fact (FactMark, FactSeen, FactBorn)
// beside marker (MarkerKey, or a ShardMarkerKey): in marker's slot, and
// under the epochs' name, so that the ACL pattern for the epochs covers
// it.
func FactKey(marker, fact string) string {
	if marker == MarkerKey {
		return "redlock:epoch:{" + MarkerKey + "}:" + fact
	}
	return marker + ":" + fact
}

// ShardMarkerKey is MarkerKey's counterpart for one hash slot of a node
// that is a Redis Cluster: the restart check of the shard that serves
// slot reads and writes it (its forms are MarkerKey's). One per slot that
// took a lock, under the epoch's name (so that the ACL pattern for the
// epochs covers it); no TTL.
func ShardMarkerKey(slot uint16) string { return EpochKey(slot) + ":node" }

// ReleaseChannel is where every node announces, with an empty message,
// that key was released and left free for anyone. The short release
// (release_free.lua) takes ReleasedPrefix and completes it, which spares
// an uncontended Unlock building the name.
func ReleaseChannel(key string) string { return ReleasedPrefix + key }

// ReleasedPrefix starts every ReleaseChannel.
const ReleasedPrefix = "redlock:released:"

// HandoffPrefix starts every HandoffChannel. A release that gives key to
// a waiting Lock call announces it to that call's Client alone, on
// HandoffChannel(client id, key): the message is the call's id and the
// number of its round that the hand-off followed ("<id> <round>"), or the
// id alone for a reservation (a fenced call). A waiter id is "<client
// id>.<n>", so the script that hands the key on finds the channel as
// HandoffPrefix + the id up to its dot + HandoffTail(key).
const HandoffPrefix = "redlock:handoff:"

// HandoffTail ends key's hand-off channels (see HandoffPrefix).
func HandoffTail(key string) string { return ":" + key }

// HandoffChannel is where the nodes announce the hand-offs of key to the
// waiters of the Client cid.
func HandoffChannel(cid, key string) string { return HandoffPrefix + cid + HandoffTail(key) }

// ReservedPrefix starts a reservation. A release keeps the key for a
// waiter that takes no hand-off (a fenced one) by leaving Reservation(its
// id) in it, for the hand-off window: SET NX from anyone fails, and the
// acquisition script lets that waiter in.
const ReservedPrefix = "redlock:reserved:"

// Reservation is the value that keeps a free key for the waiter id.
func Reservation(id string) string { return ReservedPrefix + id }

// PermitKey is the slot of permit i (from 0) of the semaphore name: a lock
// key of its own, in name's hash slot.
func PermitKey(name string, i int) string { return keyslot.Helper(name, "permit:"+strconv.Itoa(i)) }

// PermitsKey holds the semaphore name's size, as the first acquisition on
// the node set it; it has no TTL (docs/kinds.md says how to change it).
func PermitsKey(name string) string { return keyslot.Helper(name, "permits") }

// PermitWaitersKey is the queue of the Acquire calls that wait for a
// permit of the semaphore name: a sorted set of waiter ids by priority,
// smaller first (sem_acquire.lua).
func PermitWaitersKey(name string) string { return keyslot.Helper(name, "permit-waiters") }

// PermitDueKey holds when each waiter of PermitWaitersKey(name) is stale:
// a sorted set of waiter ids by the node time (µs) after which a waiter
// that has not asked again is dropped from the queue.
func PermitDueKey(name string) string { return keyslot.Helper(name, "permit-waiters:until") }

// RWKeys are the keys of the read-write lock name: its writer's key (the
// writer's token), its readers (a hash of reader token to the node time
// in ms its hold ends), the waiting writers (a sorted set of waiter id by
// priority), name itself, which a mutex would hold (a name is one kind
// of lock), when each waiting writer's place lapses, the waiting readers
// (by the node time they first waited), when each waiting reader's place
// lapses, and the start of the readers' turn (rw_release.lua).
func RWKeys(name string) [8]string {
	return [8]string{keyslot.Helper(name, "rw:writer"), keyslot.Helper(name, "rw:readers"),
		keyslot.Helper(name, "rw:writers-waiting"), name, keyslot.Helper(name, "rw:writers-waiting:until"),
		keyslot.Helper(name, "rw:readers-waiting"), keyslot.Helper(name, "rw:readers-waiting:until"),
		keyslot.Helper(name, "rw:turn")}
}

// RWMarker is what the name of a read-write lock holds, as a mutex's key,
// while anyone holds the read-write lock: a mutex's SET NX on the name
// fails, and its reply (SET ... GET) or the acquisition script says the
// name is a read-write lock's.
const RWMarker = "redlock:rwlock"

// ElectionKey is the lock key of the election name: a fenced mutex whose
// holder leads, in name's hash slot. Its fence is the leader's term.
func ElectionKey(name string) string { return keyslot.Helper(name, "election") }

// LeaderKey is the leader record of the election name: a hash of the
// leader's token, value, term and Client ID (leader_write.lua). It has no
// TTL; it counts only while ElectionKey holds its token.
func LeaderKey(name string) string { return keyslot.Helper(name, "leader") }

// LeaderChannel is where every node announces a new leader record of the
// election name, with the term as the message: the record key's release
// channel, so that an observer subscribes it as a waiter subscribes a
// key.
func LeaderChannel(name string) string { return ReleaseChannel(LeaderKey(name)) }
