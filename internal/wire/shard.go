package wire

import (
	"fmt"

	"github.com/quorumlock/redlock/pool"
)

// Restart safety counts a grant only from a process and dataset it
// checked. Where the grant may come from another than the one checked (a
// node that is a Redis Cluster grants from whichever shard serves the key;
// a pool may send a grant on a connection the check did not use), the
// grant runs inside Sharded's wrapper, which adds the identity of the
// dataset that made it to the reply.

// shardTail ends the wrapper: the script's own reply, and the identity of
// the dataset that made it (its replication id; "replica:<id>" on a
// replica, which no check counts; "run:<run id>" where the node refused
// INFO replication). An error reply goes back as it is: it grants
// nothing.
const shardTail = `
end
local reply = grant()
if type(reply) == "table" and reply.err ~= nil then
	return reply
end
local repl = redis.pcall("INFO", "replication")
local id = type(repl) == "string" and string.match(repl, "master_replid:(%x+)") or nil
local role = id and string.match(repl, "role:(%a+)")
if id and role ~= "master" and role ~= "primary" then
	id = "replica:" .. id -- a writable replica: counted by no check
elseif id == nil then
	id = "run:" .. (string.match(redis.call("INFO", "server"), "run_id:(%x+)") or "?")
end
return {id, reply}
`

// shardHead starts the wrapper on the script's first line, so that the
// lines a node names in an error are the script's own (Called).
const shardHead = "local function grant() "

// sharded maps each script of Scripts to its wrapped form, and unwrapped
// each wrapped form back.
var sharded, unwrapped = map[*pool.Script]*pool.Script{}, map[*pool.Script]*pool.Script{}

// setScript runs a grant that is a plain SET (SetArgs), for Sharded.
var setScript = pool.NewScript(1, `return redis.call("SET", KEYS[1], unpack(ARGV))`)

// CommandScript returns the script that runs the grant command cmd with
// the same arguments, for Sharded: a plain SET is the only one.
func CommandScript(cmd string) *pool.Script {
	if cmd == "SET" {
		return setScript
	}
	panic("wire: CommandScript: " + cmd + " is not a grant")
}

// wrapScripts fills sharded, once calls is filled (scripts.go's init).
func wrapScripts() {
	for _, s := range append(Scripts, ScriptInfo{"set", setScript, setScript.Source()}) {
		w := pool.NewScript(s.Script.Keys(), shardHead+s.Script.Source()+shardTail)
		sharded[s.Script], unwrapped[w] = w, s.Script
		calls[w.Hash()] = calls[s.Script.Hash()]
	}
}

// Sharded returns script s wrapped to report, beside its reply, the
// identity of the shard that ran it (ShardReply reads both).
func Sharded(s *pool.Script) *pool.Script {
	if w, ok := sharded[s]; ok {
		return w
	}
	panic("wire: Sharded: not one of the library's scripts")
}

// Unsharded returns the script that s wraps (Sharded), and whether s is
// a wrapper; a plain SET's wrapper gives nil and true.
func Unsharded(s *pool.Script) (*pool.Script, bool) {
	base, ok := unwrapped[s]
	if base == setScript {
		base = nil
	}
	return base, ok
}

// ShardReply reads the reply of a Sharded script: the identity of the
// shard's dataset that ran it, and the script's own reply.
func ShardReply(reply any) (shard string, inner any, err error) {
	vs, ok := reply.([]any)
	if ok && (len(vs) == 1 || len(vs) == 2) {
		if shard, ok = String(vs[0]); ok && shard != "" {
			if len(vs) == 2 {
				inner = vs[1]
			}
			return shard, inner, nil
		}
	}
	return "", nil, fmt.Errorf("a grant without its shard's identity: unexpected reply %v", reply)
}

// ShardOf is the identity Sharded reports for a dataset of lineage (a
// replication id) run by process runID, as the restart check tells them.
func ShardOf(runID, lineage string) string {
	if lineage == UnknownLineage {
		return "run:" + runID
	}
	return lineage
}

// FirstSlots reads a CLUSTER SLOTS reply: the lowest slot of each master,
// one per master, in the order of the reply. Entries it cannot read are
// left out.
func FirstSlots(reply any) []uint16 {
	ranges, _ := reply.([]any)
	first := map[string]int{}
	var out []uint16
	for _, r := range ranges {
		e, _ := r.([]any)
		if len(e) < 3 {
			continue
		}
		start, ok1 := e[0].(int64)
		m, _ := e[2].([]any)
		if !ok1 || start < 0 || start > 16383 || len(m) < 2 {
			continue
		}
		host, _ := String(m[0])
		port, _ := m[1].(int64)
		who := fmt.Sprintf("%s:%d", host, port)
		if k, seen := first[who]; !seen {
			first[who] = len(out)
			out = append(out, uint16(start))
		} else if uint16(start) < out[k] {
			out[k] = uint16(start)
		}
	}
	return out
}
