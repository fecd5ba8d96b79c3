-- The restart check: which process the node runs, how long it has run,
-- the lineage of its dataset (its replication id), and the marker a
-- Client left on it once the node could be counted (marker.go describes
-- the forms every version reads and writes).
local marker = KEYS[1] -- the marker key: "<run id>" once marked
local markKey = KEYS[2] -- beside it, "<run id> <replication id>" of the last mark
local seenKey = KEYS[3] -- a sighting of a dataset that came from elsewhere
local bornKey = KEYS[4] -- the shards that ran when the deployment was new
local mark = ARGV[1] -- "<run id> <replication id>", or "": the marker to write when it names the node's process and lineage
local born = ARGV[2] -- with a mark that is the node's first: the shards of a new deployment ("" for none)
local how = ARGV[3] -- with a mark: "kept" when the node is marked at once for keeping its data (durable nodes), "" otherwise

-- Returns {run id, uptime_in_seconds, marked, replication id, sighted,
-- cluster, born, own, kept}:
--   marked: the run id when the marker names this process and lineage;
--     "~" when the dataset came from another process or lineage (a
--     restart from a snapshot or an append-only file, or a replica
--     promoted) and carried a marker; "+" for a marker of a form this
--     version does not know, on a dataset of its own; "" when there is
--     none.
--   sighted: -1, or the seconds since a check first saw this process with
--     this lineage unmarked (a sighting the check keeps): what the node
--     may have missed is counted from then, not from its start, for a
--     promoted replica has run far longer than it has led.
--   cluster: 1 when the node runs in cluster mode (INFO server's
--     redis_mode, or server_mode on Valkey), 0 otherwise: the marker is
--     then one slot's, and each shard is checked on its own.
--   born: the shards that ran when the deployment was new ("" for none).
--   own: 1 when the dataset's lineage began in this process, 0 otherwise.
--   kept: 1 when the mark says the node kept its data and was marked at
--     once for it (a Client that declares the nodes durable), 0 otherwise.
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
local replid2 = string.match(repl, "master_replid2:(%x+)")
-- own: the dataset's lineage began in this process (it was never a
-- replica since it started), so a lineage a mark or a sighting could not
-- tell ("0", or none) is this one.
local own = replid2 == nil or not string.find(replid2, "[^0]")
local self = id .. " " .. replid
local owned = own and 1 or 0

local function fields(v)
	local f = {}
	for w in string.gmatch(v or "", "%S+") do
		f[#f + 1] = w
	end
	return f
end
-- lineageIs reports whether lineage l, recorded with this process's run
-- id, is this dataset's: the same, or unknown to one side (a Client
-- without +info|replication wrote it, or asks now).
local function lineageIs(l)
	return l == replid or replid == "0" or ((l == nil or l == "0") and own)
end

local function sighting(f)
	return (f[1] == "~" or f[1] == "?") and string.find(f[2] or "", "^%x+$") ~= nil
		and string.find(f[3] or "", "^%x+$") ~= nil and string.find(f[4] or "", "^%d+$") ~= nil
end

local v = redis.call("GET", marker)
local mf = fields(v)
local sf = fields(redis.call("GET", markKey))
local lineage = mf[2]
if (lineage == nil or lineage == "0") and sf[1] == mf[1] then
	lineage = sf[2]
end
local marked = mf[1] == id and lineageIs(lineage)
if marked or mark == self then
	if v ~= id then
		if sighting(mf) and not redis.call("GET", seenKey) then
			redis.call("SET", seenKey, v) -- an earlier version's sighting, kept for the Clients it still holds back
		end
		redis.call("SET", marker, id)
	end
	if not marked then
		redis.call("SET", markKey, how ~= "" and self .. " " .. how or self)
		sf = fields(redis.call("GET", markKey))
	elseif replid ~= "0" and sf[2] ~= replid then
		redis.call("SET", markKey, self) -- the lineage, for a mark that did not have it
	end
	if not marked and born ~= "" then
		redis.call("SET", bornKey, born)
	end
	if replid ~= "0" then
		-- Counted by a Client that sees the lineage: the sighting is
		-- over. One that does not see it leaves it to those that do.
		redis.call("DEL", seenKey)
	end
	local kept = (sf[1] == id and sf[3] == "kept") and 1 or 0
	return {id, up, id, replid, -1, cluster, redis.call("GET", bornKey) or "", owned, kept}
end
born = redis.call("GET", bornKey) or ""

-- A sighting of this process and lineage: in the hash, or a record in
-- the marker ("~ <run id> <replication id> <uptime>", as earlier versions
-- wrote it). The earliest counts.
local kind, seen
for _, f in ipairs({mf, fields(redis.call("GET", seenKey))}) do
	if sighting(f) and f[2] == id and lineageIs(f[3]) and (seen == nil or tonumber(f[4]) < seen) then
		kind, seen = f[1], tonumber(f[4])
	end
end
if kind ~= nil then
	return {id, up, kind == "~" and "~" or "", replid, math.max(up - seen, 0), cluster, born, owned, 0}
end
-- known: the marker is a mark or a sighting of some process; any other
-- value is of a form this version does not know, which it neither reads
-- as another process's nor overwrites.
local known = string.find(mf[1] or "", "^%x+$") ~= nil or sighting(mf)
if not known and own then
	-- No marker (or one of a later form: "+"), on a dataset that began in
	-- this process: its uptime says how long it has held what it holds.
	return {id, up, v and "+" or "", replid, -1, cluster, born, owned, 0}
end
-- Another process's or lineage's marker, or none on a dataset that
-- continues another: note when this lineage was first seen.
kind = "~"
if not known or mf[1] == "?" then
	kind = "?"
end
redis.call("SET", seenKey, kind .. " " .. self .. " " .. up)
return {id, up, kind == "~" and "~" or "", replid, 0, cluster, born, owned, 0}
