package redlock

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

var (
	//go:embed queue.lua
	queueSource string
	//go:embed acquire.lua
	acquireSource string
	//go:embed release.lua
	releaseSource string
	//go:embed release_free.lua
	releaseFreeSource string
	//go:embed extend.lua
	extendSource string
	//go:embed fence_store.lua
	fenceStoreSource string
	//go:embed node.lua
	nodeSource string

	// The scripts take the keys in KEYS and every value in ARGV; nothing
	// is ever interpolated into their source. The acquisition script takes
	// 3 keys, 5 with fencing, so its key count goes with each call. The
	// two scripts that work on the waiters' queue share its functions,
	// which come first in their source.
	acquireScript     = redis.NewScript(-1, queueSource+acquireSource)
	releaseScript     = redis.NewScript(3, queueSource+releaseSource)
	releaseFreeScript = redis.NewScript(1, releaseFreeSource)
	extendScript      = redis.NewScript(1, extendSource)
	fenceStoreScript  = redis.NewScript(1, fenceStoreSource)
	nodeScript        = redis.NewScript(1, nodeSource)
)

// The keys and the channel that go with a lock key. They are derived from
// the key alone, so that every client of a key agrees on them.
func waitersKey(key string) string   { return key + ":waiters" }
func deadlinesKey(key string) string { return key + ":waiters:until" }

// reservedPrefix starts the value a release leaves in the lock key to keep
// it for a waiter that takes no hand-off (a fenced one): reservedPrefix +
// the waiter's id (giveToHead in queue.lua; acquire.lua lets it in).
const reservedPrefix = "redlock:reserved:"

// ReleaseChannel returns the pub/sub channel on which every node announces
// that lock key was released and is free for anyone: "redlock:released:"
// + key, with an empty message (the scripts derive it from the key). A
// release that gives the key to a waiting Lock call announces it only to
// that call's Client, on "redlock:handoff:<client id>:" + key: the
// message is the call's id and the number of its round that the hand-off
// followed ("<id> <round>"), or the id alone for a reservation (a fenced
// call). Waiting Lock calls subscribe to both; nothing else needs to.
func ReleaseChannel(key string) string { return "redlock:released:" + key }

// handoffChannel is the channel on which the nodes tell Client cid that
// key is kept for one of its waiters (see ReleaseChannel). A waiter id is
// cid + "." + a number, and the scripts find the channel from it.
func handoffChannel(cid, key string) string { return "redlock:handoff:" + cid + ":" + key }

// releaseCall returns the script and arguments that give up token on
// key. A key that is not contended (queued is false: the lock was taken
// without waiting and the Client waits for no one on it) is released the
// short way, which leaves the key free; release_free.lua says why the
// order of a queue, if there is one after all, still holds. Otherwise the
// full release gives the key to the head of the queue; waited is the
// queue id the lock was waited for with ("" for none), alt a second value
// given up with token ("" for none: see releaseArgs).
func (c *Client) releaseCall(key, token, waited, alt string, queued bool) (*redis.Script, []any) {
	if !queued {
		return releaseFreeScript, []any{key, token}
	}
	return releaseScript, c.releaseArgs(key, token, waited, alt)
}

// releaseArgs are the release script's keys and arguments: key gives up
// owned (a token, or a waiter's hand-off token or reservation) and alt
// ("" for none): a lock won by a round also gives up its waiter's hand-off
// token, which a node may have set after the round ran there. waited is
// the queue id that leaves the queue ("" for none).
func (c *Client) releaseArgs(key, owned, waited, alt string) []any {
	return []any{key, waitersKey(key), deadlinesKey(key), owned, c.windowArg, waited, alt, c.slackMs}
}
