package redlock

import (
	_ "embed"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/pool"
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
	//go:embed inspect.lua
	inspectSource string
	//go:embed force_release.lua
	forceReleaseSource string
	//go:embed multi_acquire.lua
	multiAcquireSource string
	//go:embed multi_extend.lua
	multiExtendSource string
	//go:embed multi_release.lua
	multiReleaseSource string

	// The scripts take the keys in KEYS and every value in ARGV, the names
	// of channels included (keys.go); nothing is ever interpolated into
	// their source. Each names its keys and arguments at its top. The
	// acquisition script takes 3 keys, 5 with fencing, so its key count
	// goes with each call. The two scripts that work on the waiters' queue
	// share its functions, and its keys and first arguments, which come
	// first in their source (queue.lua).
	acquireScript     = pool.NewScript(-1, queueSource+acquireSource)
	releaseScript     = pool.NewScript(3, queueSource+releaseSource)
	releaseFreeScript = pool.NewScript(1, releaseFreeSource)
	extendScript      = pool.NewScript(1, extendSource)
	fenceStoreScript  = pool.NewScript(1, fenceStoreSource)
	nodeScript        = pool.NewScript(1, nodeSource)
	inspectScript     = pool.NewScript(3, inspectSource)
	forceScript       = pool.NewScript(3, queueSource+forceReleaseSource)
	// The multi-key scripts take as many keys as the lock has (3 times
	// as many for a fenced acquisition): the count goes with each call.
	multiAcquireScript = pool.NewScript(-1, multiAcquireSource)
	multiExtendScript  = pool.NewScript(-1, multiExtendSource)
	multiReleaseScript = pool.NewScript(-1, multiReleaseSource)
)

// releaseCall returns the script and arguments that give up token on
// key. A key that is not contended (queued is false: the lock was taken
// without waiting and the Client waits for no one on it) is released the
// short way, which leaves the key free; release_free.lua says why the
// order of a queue, if there is one after all, still holds. Otherwise the
// full release gives the key to the head of the queue; waited is the
// queue id the lock was waited for with ("" for none), alt a second value
// given up with token ("" for none: see releaseArgs). boxed, when not
// nil, is key and token boxed already (a plain round's arguments), which
// the short release uses as they are.
func (c *Client) releaseCall(key, token string, boxed []any, waited, alt string, queued bool) (*pool.Script, []any) {
	if !queued {
		if boxed != nil {
			return releaseFreeScript, releaseFreeArgs(boxed[0], boxed[1])
		}
		return releaseFreeScript, releaseFreeArgs(key, token)
	}
	return releaseScript, c.releaseArgs(key, token, waited, alt)
}

// The arguments of each script, in the order of the named locals at the
// top of its source; the keys and channels come from keys.go.

// acquireArgs are the acquisition script's key count, keys and arguments
// for a round of w (nil for a caller that does not wait) that sets token
// for ms; epoch is a new random epoch for a fenced acquisition, "" for
// none.
func (c *Client) acquireArgs(key, token string, ms int64, w *waiter, epoch string) []any {
	id, prio, waited, round, handoff := "", int64(0), int64(0), 0, ""
	if w != nil {
		id, prio, waited = w.id, w.sinceWall, c.cfg.clock.Now().Sub(w.since).Microseconds()
		round, handoff = w.rounds+1, w.token
	}
	nkeys := 3
	if epoch != "" {
		nkeys = 5
	}
	args := make([]any, 0, 20)
	args = append(args, nkeys, key, waitersKey(key), entriesKey(key))
	if epoch != "" {
		args = append(args, fenceKey(key), epochKey(keyslot.Slot(key)))
	}
	args = c.appendQueueArgs(args, key)
	args = append(args, token, ms, id, prio, waited, c.refreshMs, round, handoff)
	if epoch != "" {
		args = append(args, epoch)
	}
	return args
}

// releaseArgs are the release script's keys and arguments: key gives up
// owned (a token, or a waiter's hand-off token or reservation) and alt
// ("" for none): a lock won by a round also gives up its waiter's hand-off
// token, which a node may have set after the round ran there. waited is
// the queue id that leaves the queue ("" for none).
func (c *Client) releaseArgs(key, owned, waited, alt string) []any {
	args := make([]any, 0, 12)
	args = append(args, key, waitersKey(key), entriesKey(key))
	args = c.appendQueueArgs(args, key)
	return append(args, owned, waited, alt, releaseChannel(key))
}

// appendQueueArgs appends the arguments that queue.lua takes first in
// the acquisition and release scripts, ARGV[1..5].
func (c *Client) appendQueueArgs(args []any, key string) []any {
	return append(args, reservedPrefix, handoffPrefix, handoffTail(key), c.windowArg, c.slackMs)
}

// inspectArgs are the inspection script's keys: key, its queue and its
// fence counter.
func inspectArgs(key string) []any {
	return []any{key, waitersKey(key), fenceKey(key)}
}

// forceArgs are the forced release's keys and arguments: key is given up
// whatever it holds.
func (c *Client) forceArgs(key string) []any {
	args := make([]any, 0, 9)
	args = append(args, key, waitersKey(key), entriesKey(key))
	args = c.appendQueueArgs(args, key)
	return append(args, releaseChannel(key))
}

// releaseFreeArgs are the short release's keys and arguments: key gives
// up token.
func releaseFreeArgs(key, token any) []any {
	return []any{key, token, releasedPrefix}
}

// extendArgs are the extension script's keys and arguments: key, if it
// holds token, lives ms from now.
func extendArgs(key, token string, ms int64) []any {
	return []any{key, token, ms}
}

// fenceStoreArgs are the fence write-back's keys and arguments: key's
// counter takes fence if it is above it.
func fenceStoreArgs(key string, fence uint64) []any {
	return []any{fenceKey(key), fence}
}

// nodeArgs are the restart check's keys and arguments: mark is the run
// id to mark the node with, if it is the node's, "" for none.
func nodeArgs(mark string) []any {
	return []any{markerKey, mark}
}

// multiAcquireArgs are the multi-key acquisition's key count, keys and
// arguments: keys take token for ms; with fencing (epoch is not "") their
// fence counters and their slots' epochs come after them.
func multiAcquireArgs(keys []string, token string, ms int64, epoch string) []any {
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
			args = append(args, fenceKey(k))
		}
		for _, k := range keys {
			args = append(args, epochKey(keyslot.Slot(k)))
		}
	}
	return append(args, token, ms, len(keys), epoch)
}

// multiKeysArgs are the key count and keys of the multi-key extension and
// release, then their arguments.
func multiKeysArgs(keys []string, more ...any) []any {
	args := make([]any, 0, len(keys)+1+len(more))
	args = append(args, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return append(args, more...)
}
