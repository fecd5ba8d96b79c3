package wire

import (
	_ "embed"
	"regexp"
	"strings"

	"github.com/quorumlock/redlock/pool"
)

var (
	//go:embed queue.lua
	queueSource string
	//go:embed place.lua
	placeSource string
	//go:embed rw_queue.lua
	rwQueueSource string
	//go:embed fence_read.lua
	fenceReadSource string
	//go:embed acquire.lua
	acquireSource string
	//go:embed give_up.lua
	giveUpSource string
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
	//go:embed sem_acquire.lua
	semAcquireSource string
	//go:embed sem_release.lua
	semReleaseSource string
	//go:embed rw_read.lua
	rwReadSource string
	//go:embed rw_write.lua
	rwWriteSource string
	//go:embed rw_extend.lua
	rwExtendSource string
	//go:embed rw_release.lua
	rwReleaseSource string
	//go:embed leader_write.lua
	leaderWriteSource string
	//go:embed leader_read.lua
	leaderReadSource string
	//go:embed leader_extend.lua
	leaderExtendSource string
	//go:embed inspect_semaphore.lua
	inspectSemaphoreSource string
	//go:embed inspect_rw.lua
	inspectRWSource string
	//go:embed inspect_election.lua
	inspectElectionSource string
)

// The scripts. Each names its keys and arguments at the top of its
// source; the builders in args.go pass them in that order. The scripts
// that work on the waiters' queue (the acquisition, the release and the
// forced release) share its function and its first two keys, which come
// first in their source (queue.lua); the two releases also share giveUp
// (give_up.lua), and the two acquisitions that queue (a lock's and a
// semaphore's) the rule that places a waiting call (place.lua). A key
// count of -1 means
// the count goes with each call (KeyCount).
var (
	// Acquire takes a key for a token (2 keys, 4 with fencing), queues a
	// waiting Lock call when the key is held, and reports the holder's TTL.
	Acquire = pool.NewScript(-1, queueSource+placeSource+fenceReadSource+acquireSource)
	// Release gives a key up and hands it to the head of its queue.
	Release = pool.NewScript(2, queueSource+giveUpSource+releaseSource)
	// ReleaseFree gives up a key that no one waits for: it is left free.
	ReleaseFree = pool.NewScript(1, releaseFreeSource)
	// Extend gives a key that holds the token a new TTL.
	Extend = pool.NewScript(1, extendSource)
	// FenceStore writes a fence back to a key's counter if it is larger.
	FenceStore = pool.NewScript(2, fenceStoreSource)
	// NodeCheck is restart safety's check: run id, uptime and marker.
	NodeCheck = pool.NewScript(4, nodeSource)
	// Inspect reads what a node holds for a key, writing nothing.
	Inspect = pool.NewScript(4, fenceReadSource+inspectSource)
	// ForceRelease gives a key up whatever it holds.
	ForceRelease = pool.NewScript(2, queueSource+giveUpSource+forceReleaseSource)
	// MultiAcquire takes every key of a multi-key lock or none (as many
	// keys as the lock has, three times as many fenced).
	MultiAcquire = pool.NewScript(-1, fenceReadSource+multiAcquireSource)
	// MultiExtend extends every key of a multi-key lock or none.
	MultiExtend = pool.NewScript(-1, multiExtendSource)
	// MultiRelease gives up every key of a multi-key lock.
	MultiRelease = pool.NewScript(-1, multiReleaseSource)
	// SemAcquire takes a free permit slot of a semaphore (its slots and
	// its size key: permits + 1 keys).
	SemAcquire = pool.NewScript(-1, placeSource+fenceReadSource+semAcquireSource)
	// SemRelease gives up the slots of a semaphore that hold a token.
	SemRelease = pool.NewScript(-1, semReleaseSource)
	// RWRead joins a read-write lock's readers (RWKeys' 8 keys).
	RWRead = pool.NewScript(8, rwQueueSource+rwReadSource)
	// RWWrite takes a read-write lock for a writer (RWKeys' 8 keys).
	RWWrite = pool.NewScript(8, placeSource+rwQueueSource+rwWriteSource)
	// RWExtend extends a read-write lock's writer or a live reader
	// (RWKeys' 8 keys).
	RWExtend = pool.NewScript(8, rwExtendSource)
	// RWRelease gives up a read-write lock's writer or reader, or a
	// waiting call's place (RWKeys' 8 keys).
	RWRelease = pool.NewScript(8, rwQueueSource+rwReleaseSource)
	// LeaderWrite writes an election's leader record while the election
	// key holds the leader's token, and announces it.
	LeaderWrite = pool.NewScript(2, leaderWriteSource)
	// LeaderRead reads an election key's token and its leader record.
	LeaderRead = pool.NewScript(2, leaderReadSource)
	// LeaderExtend extends an election leader's lock as Extend does, and
	// writes its leader record where the key holds its token and the
	// record is missing or another's.
	LeaderExtend = pool.NewScript(2, leaderExtendSource)
	// InspectSemaphore reads a semaphore's slots, size and queue (its
	// slots, then the size key and the queue: permits + 2 keys).
	InspectSemaphore = pool.NewScript(-1, inspectSemaphoreSource)
	// InspectRW reads a read-write lock's writer, live readers and first
	// waiting writer (RWKeys' 8 keys).
	InspectRW = pool.NewScript(8, inspectRWSource)
	// InspectElection reads an election key as Inspect does, and its
	// leader record.
	InspectElection = pool.NewScript(5, fenceReadSource+inspectElectionSource)
)

// ScriptInfo is one script of the protocol, with its name and source.
type ScriptInfo struct {
	Name   string // its file's name, without .lua
	Script *pool.Script
	Source string // the source the node runs (queue.lua's and place.lua's functions included)
}

// Scripts is every script the Clients run, in one table: what names the
// command a node refused inside one of them (Called), and what the tests
// check the scripts against.
var Scripts = []ScriptInfo{
	{"acquire", Acquire, queueSource + placeSource + fenceReadSource + acquireSource},
	{"release", Release, queueSource + giveUpSource + releaseSource},
	{"release_free", ReleaseFree, releaseFreeSource},
	{"extend", Extend, extendSource},
	{"fence_store", FenceStore, fenceStoreSource},
	{"node", NodeCheck, nodeSource},
	{"inspect", Inspect, fenceReadSource + inspectSource},
	{"force_release", ForceRelease, queueSource + giveUpSource + forceReleaseSource},
	{"multi_acquire", MultiAcquire, fenceReadSource + multiAcquireSource},
	{"multi_extend", MultiExtend, multiExtendSource},
	{"multi_release", MultiRelease, multiReleaseSource},
	{"sem_acquire", SemAcquire, placeSource + fenceReadSource + semAcquireSource},
	{"sem_release", SemRelease, semReleaseSource},
	{"rw_read", RWRead, rwQueueSource + rwReadSource},
	{"rw_write", RWWrite, placeSource + rwQueueSource + rwWriteSource},
	{"rw_extend", RWExtend, rwExtendSource},
	{"rw_release", RWRelease, rwQueueSource + rwReleaseSource},
	{"leader_write", LeaderWrite, leaderWriteSource},
	{"leader_read", LeaderRead, leaderReadSource},
	{"leader_extend", LeaderExtend, leaderExtendSource},
	{"inspect_semaphore", InspectSemaphore, inspectSemaphoreSource},
	{"inspect_rw", InspectRW, inspectRWSource},
	{"inspect_election", InspectElection, fenceReadSource + inspectElectionSource},
}

// calls maps each script's SHA1 to the command called on each line of
// its source.
var calls = map[string]map[int]string{}

var callRE = regexp.MustCompile(`redis\.p?call\("([A-Za-z]+)"`)

func init() {
	for _, s := range Scripts {
		lines := map[int]string{}
		for n, line := range strings.Split(s.Source, "\n") {
			if m := callRE.FindStringSubmatch(line); m != nil {
				lines[n+1] = strings.ToUpper(m[1])
			}
		}
		calls[s.Script.Hash()] = lines
	}
	wrapScripts()
}

// Called returns the command that line of the script whose SHA1 is hash
// calls, in upper case, and whether there is one: a node names the line
// of a command it refused inside a script, not the command.
func Called(hash string, line int) (string, bool) {
	cmd, ok := calls[hash][line]
	return cmd, ok
}
