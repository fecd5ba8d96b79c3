package redlock

import "github.com/quorumlock/redlock/internal/keyslot"

// The names of everything a Client keeps on the nodes or announces
// through them, all derived here. The scripts build none of them: the
// Client passes each key in KEYS and each channel or value in ARGV
// (scripts.go). A script completes two names: the hand-off channel of
// the waiter at the head of a queue, whose Client only the node knows (it
// gets the parts around the Client id), and, in the short release, the
// release channel (it gets the prefix). docs/operations.md
// ("Keys and channels") has the table of them all: type, contents, writer.
//
// Every process that locks the same keys shares these names: keep them
// byte for byte.
//
// Every key a script touches with a lock key is in the lock key's Redis
// Cluster hash slot, so that a node may be a cluster (docs/operations.md,
// "Keys and channels"): the helper keys are named after the lock key's
// hash tag (keyslot.Helper).

// waitersKey is the queue of the Lock calls that wait for key: a sorted
// set of waiter ids by priority (queue.lua).
func waitersKey(key string) string { return keyslot.Helper(key, "waiters") }

// entriesKey is the hash of the queue's entries: waiter id -> deadline,
// and latest round, TTL and hand-off token (queue.lua).
func entriesKey(key string) string { return keyslot.Helper(key, "waiters:until") }

// fenceKey is key's fence counter (WithFencing). It has no TTL.
func fenceKey(key string) string { return keyslot.Helper(key, "fence") }

// epochKey holds the node's epoch for a hash slot: a random value the
// first fenced acquisition of a key in the slot creates (SET NX, no TTL).
// A node that lost its data comes back without it, so a new value tells
// the Client that the node's fence counters are gone (docs/fencing.md).
// One per slot rather than one per node, so that the acquisition script
// reaches it on a cluster; the Client remembers one per slot and node at
// most.
func epochKey(slot uint16) string { return "redlock:epoch:{" + keyslot.Tag(slot) + "}" }

// markerKey holds the run id of the node's process that restart safety
// last counted (docs/safety.md). It has no TTL.
const markerKey = "redlock:node"

// releaseChannel is where every node announces, with an empty message,
// that key was released and left free for anyone. The short release
// (release_free.lua) takes releasedPrefix and completes it, which spares
// an uncontended Unlock building the name.
func releaseChannel(key string) string { return releasedPrefix + key }

const releasedPrefix = "redlock:released:"

// A release that gives key to a waiting Lock call announces it to that
// call's Client alone, on handoffChannel(client id, key): the message is
// the call's id and the number of its round that the hand-off followed
// ("<id> <round>"), or the id alone for a reservation (a fenced call). A
// waiter id is "<client id>.<n>" (newWaiter), so the script that hands
// the key on finds the channel as handoffPrefix + the id up to its dot +
// handoffTail(key).
const handoffPrefix = "redlock:handoff:"

func handoffTail(key string) string { return ":" + key }

func handoffChannel(cid, key string) string { return handoffPrefix + cid + handoffTail(key) }

// A release keeps the key for a waiter that takes no hand-off (a fenced
// one) by leaving reservation(its id) in it, for the hand-off window:
// SET NX from anyone fails, and the acquisition script lets that waiter
// in. The scripts, which make reservations for the waiter at the head of
// the queue, take reservedPrefix.
const reservedPrefix = "redlock:reserved:"

func reservation(id string) string { return reservedPrefix + id }
