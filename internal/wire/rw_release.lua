-- Read-write lock, a release (rw_queue.lua comes first): give up the
-- writer's key or the reader's entry that holds our token, and announce
-- it to the waiting Clients that can use it. A waiting call's place goes
-- when the call leaves (with the lock or without) or, a reader's, with
-- its hold's release. A writer's release while readers wait begins the
-- readers' turn: those that waited since before it go in before the next
-- writer (rw_read.lua, rw_write.lua), and only readers are told. A
-- reader's release while other live readers remain lets no one in and is
-- not announced; the last one's names the first waiting writer while any
-- waits.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local writers = KEYS[3] -- sorted set: waiting writer id by priority
local mutex = KEYS[4] -- the name as a mutex's key, which holds the marker
local writersDue = KEYS[5] -- sorted set: waiting writer id by the node time (µs) its place lapses
local waiting = KEYS[6] -- sorted set: waiting reader id by the node time (µs) it first waited
local waitingDue = KEYS[7] -- sorted set: waiting reader id by the node time (µs) its place lapses
local turn = KEYS[8] -- the node time (µs) of the writer's release that began the readers' turn
local token = ARGV[1] -- the owner token
local releaseChannel = ARGV[2] -- where a release is announced: the name's release channel
local marker = ARGV[3] -- what the mutex key holds while the read-write lock is held
local waiter = ARGV[4] -- the id of the waiting call (reader or writer) whose place goes; "" for none
local turnMs = tonumber(ARGV[5] or "0") -- how long (ms) a readers' turn lasts at most
local forReaders = ARGV[6] or "" -- the announcement of a release only readers can use
local announce = (ARGV[7] or "1") == "1" -- "": a leave of a call that took the lock, announced to no one

-- Returns 1 when the token held something here (without a token: when
-- the waiter had a place) and it is given up, 0 otherwise; {1, error}
-- when given up but the node refused to announce it (PUBLISH denied).
local freed, to = 0, "" -- to: who the release is announced to ("" anyone; nil no one)
if waiter ~= "" then
	local had = 0
	for _, k in ipairs({writers, writersDue, waiting, waitingDue}) do
		had = math.max(had, redis.call("ZREM", k, waiter))
	end
	if token == "" then
		freed = had
		if not announce then
			-- The call holds the lock: the place it frees lets no one in.
			to = nil
		end
	end
end
if token == "" then
	-- Nothing held to give up.
elseif redis.call("GET", writer) == token then
	redis.call("DEL", writer)
	freed = 1
	if turnMs > 0 and redis.call("ZCARD", waiting) > 0 then
		local t = redis.call("TIME")
		redis.call("SET", turn, t[1] * 1000000 + t[2], "PX", turnMs)
		to = forReaders
	end
elseif redis.call("HDEL", readers, token) == 1 then
	freed = 1
	local t = redis.call("TIME")
	local nowMs = t[1] * 1000 + math.floor(t[2] / 1000)
	local kv = redis.call("HGETALL", readers)
	for i = 2, #kv, 2 do
		if tonumber(kv[i]) > nowMs then
			to = nil -- another reader is still in
			break
		end
	end
	if to and redis.call("ZCARD", writers) > 0 then
		-- The last live reader out: the first waiting writer goes next,
		-- and only it is named (places that lapsed are dropped first).
		prune(writers, writersDue, t[1] * 1000000 + t[2])
		to = redis.call("ZRANGE", writers, 0, 0)[1] or ""
	end
end
if freed == 0 then
	return 0
end
-- The last holder out takes the marker away: the name is free for any kind.
if redis.call("EXISTS", writer, readers) == 0 and redis.call("GET", mutex) == marker then
	redis.call("DEL", mutex)
end
if not to then
	return 1
end
local r = redis.pcall("PUBLISH", releaseChannel, to)
if type(r) == "table" and r.err then
	return {1, r.err}
end
return 1
