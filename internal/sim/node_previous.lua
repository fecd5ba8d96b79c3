-- The restart check: which process the node runs, how long it has run,
-- the lineage of its dataset (its replication id), and the marker a
-- Client left on it once the node could be counted.
local marker = KEYS[1] -- the marker key
local mark = ARGV[1] -- "<run id> <replication id>", or "": the marker to write when it names the node's process and lineage

-- Returns {run id, uptime_in_seconds, marked, replication id, sighted,
-- cluster}:
--   marked: the run id when the marker names this process and lineage;
--     "~" when the dataset came from another process or lineage (a
--     restart from a snapshot or an append-only file, or a replica
--     promoted) and carried a marker; "" when there is none.
--   sighted: -1, or the seconds since a check first saw this process with
--     this lineage unmarked (a record the check keeps in the marker key):
--     what the node may have missed is counted from then, not from its
--     start, for a promoted replica has run far longer than it has led.
--   cluster: 1 when the node runs in cluster mode (INFO server's
--     redis_mode, or server_mode on Valkey), 0 otherwise: the marker is
--     then one slot's, and each shard is checked on its own.
-- A replica grants nothing: the check fails on it.
local info = redis.call("INFO", "server")
local id = string.match(info, "run_id:(%x+)")
local up = tonumber(string.match(info, "uptime_in_seconds:(%d+)"))
if id == nil or up == nil then
	return redis.error_reply("redlock: INFO server has no run_id or uptime_in_seconds")
end
local mode = string.match(info, "redis_mode:(%a+)") or string.match(info, "server_mode:(%a+)")
local cluster = mode == "cluster" and 1 or 0
local repl = redis.pcall("INFO", "replication")
if type(repl) == "table" then
	-- Refused (an ACL without +info|replication): the lineage is unknown,
	-- "0", and the Client warns that it cannot see a failover.
	repl = "role:master\r\nmaster_replid:0\r\n"
end
local role = string.match(repl, "role:(%a+)")
local replid = string.match(repl, "master_replid:(%x+)")
if role == nil or replid == nil then
	return redis.error_reply("redlock: INFO replication has no role or master_replid")
end
if role ~= "master" and role ~= "primary" then
	return redis.error_reply("redlock: the node is a replica (role:" .. role .. "), not a master: counted toward no quorum")
end
local self = id .. " " .. replid
local v = redis.call("GET", marker)
if v == self or v == id or mark == self then
	-- Marked (a marker of the run id alone predates lineages: this
	-- process wrote it, so it has its lineage).
	if v ~= self then
		redis.call("SET", marker, self)
	end
	return {id, up, id, replid, -1, cluster}
end
local kind, seen = string.match(v or "", "^([~?]) " .. self .. " (%d+)$")
if kind ~= nil then
	return {id, up, kind == "~" and "~" or "", replid, math.max(up - tonumber(seen), 0), cluster}
end
local replid2 = string.match(repl, "master_replid2:(%x+)")
if not v and (replid2 == nil or not string.find(replid2, "[^0]")) then
	-- No marker, on a dataset that began in this process: its uptime
	-- says how long it has held what it holds.
	return {id, up, "", replid, -1, cluster}
end
-- Another process's or lineage's marker, or none on a dataset that
-- continues another: note when this lineage was first seen.
kind = "~"
if not v or string.sub(v, 1, 1) == "?" then
	kind = "?"
end
redis.call("SET", marker, kind .. " " .. self .. " " .. up)
return {id, up, kind == "~" and "~" or "", replid, 0, cluster}
