-- Read-write lock, a release: give up the writer's key or the reader's
-- entry that holds our token, and announce it to every waiting Client;
-- a waiting call that gives up takes its place away. A writer's release
-- while readers wait begins the readers' turn: those that waited since
-- before it go in before the next writer (rw_read.lua, rw_write.lua).
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
local waiter = ARGV[4] -- the id of a waiting call (reader or writer) whose place goes; "" for none
local turnMs = tonumber(ARGV[5] or "0") -- how long (ms) a readers' turn lasts at most

-- Returns 1 when the token held something here (or the waiter had a
-- place) and it is given up, 0 otherwise; {1, error} when given up but
-- the node refused to announce it (PUBLISH denied).
local freed = 0
if waiter ~= "" then
	for _, k in ipairs({writers, writersDue, waiting, waitingDue}) do
		freed = math.max(freed, redis.call("ZREM", k, waiter))
	end
elseif redis.call("GET", writer) == token then
	redis.call("DEL", writer)
	freed = 1
	if turnMs > 0 and redis.call("ZCARD", waiting) > 0 then
		local t = redis.call("TIME")
		redis.call("SET", turn, t[1] * 1000000 + t[2], "PX", turnMs)
	end
elseif redis.call("HDEL", readers, token) == 1 then
	freed = 1
end
if freed == 0 then
	return 0
end
-- The last holder out takes the marker away: the name is free for any kind.
if redis.call("EXISTS", writer, readers) == 0 and redis.call("GET", mutex) == marker then
	redis.call("DEL", mutex)
end
local r = redis.pcall("PUBLISH", releaseChannel, "")
if type(r) == "table" and r.err then
	return {1, r.err}
end
return 1
