-- Read-write lock, a writer (place.lua and rw_queue.lua come first).
-- Phase-fair: a writer takes the lock while no writer holds it, no live
-- reader is in, no reader whose turn it is still waits (the readers that
-- waited since before the last writer's release go first), and no waiting
-- writer goes before it. Waiting writers queue
-- by a priority their Client gives them (when they began to wait), the
-- same on every node, so that the nodes agree on which goes next (a node
-- places by its own clock a writer whose Client's clock is more than a
-- second off, as the mutex's and the semaphore's queues do); while any
-- waits, new readers wait behind it.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local writers = KEYS[3] -- sorted set: waiting writer id by priority, smaller first
local mutex = KEYS[4] -- the name as a mutex's key: a name is one kind of lock
local writersDue = KEYS[5] -- sorted set: waiting writer id by the node time (µs) its place lapses
local waiting = KEYS[6] -- sorted set: waiting reader id by the node time (µs) it first waited
local waitingDue = KEYS[7] -- sorted set: waiting reader id by the node time (µs) its place lapses
local turn = KEYS[8] -- the node time (µs) of the writer's release that began the readers' turn
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the TTL in ms
local life = tonumber(ARGV[3]) -- how long (ms) a waiting writer's place lasts unless it asks again; 0 for a call that does not wait
local waiter = ARGV[4] -- the waiting writer's id; "" for a call that does not wait
local marker = ARGV[5] -- what the mutex key holds while the read-write lock is held
local priority = ARGV[6] or "0" -- the waiting writer's priority: when it began to wait, µs of its Client's wall clock
local waited = ARGV[7] or "0" -- how long (µs) it has waited by its Client's monotonic clock
local sec = ARGV[8] or "" -- its Client's wall-clock time when it sent the round (priority + waited), in whole seconds

-- Returns 1 when taken; {0, pttl} when refused, pttl the ms until the
-- holders (the writer, or the last live reader) run out, until the
-- readers' turn ends when it waits for readers whose turn it is, or until
-- the first waiting writer's place lapses when it waits for writers
-- before it (each lapses unless its call asks again); {4} when a mutex
-- holds the name.
local m = redis.call("GET", mutex)
if m and m ~= marker then
	return {4}
end
local t = redis.call("TIME")
local now = t[1] * 1000000 + t[2]
prune(writers, writersDue, now)
prune(waiting, waitingDue, now)
-- A waiting writer takes (or keeps) its place before anything else: it
-- is then counted by every reader that comes after it.
if waiter ~= "" and life > 0 then
	-- Where it is queued (ZADD XX INCR 0 reads it and changes nothing),
	-- or, new here, where placed puts it.
	priority = redis.call("ZADD", writers, "XX", "INCR", 0, waiter) or placed(priority, waited, sec, t)
	redis.call("ZADD", writers, priority, waiter)
	redis.call("ZADD", writersDue, now + life * 1000, waiter)
	for _, k in ipairs({writers, writersDue}) do
		if redis.call("PTTL", k) < life then
			redis.call("PEXPIRE", k, life)
		end
	end
end
local p = redis.call("PTTL", writer)
if p ~= -2 then
	return {0, p}
end
local nowMs = math.floor(now / 1000)
local kv = redis.call("HGETALL", readers)
local last = -1
for i = 1, #kv, 2 do
	local left = tonumber(kv[i + 1]) - nowMs
	if left <= 0 then
		redis.call("HDEL", readers, kv[i])
	else
		last = math.max(last, left)
	end
end
if last > 0 then
	return {0, last}
end
local began = redis.call("GET", turn)
if began then
	if redis.call("ZCOUNT", waiting, "-inf", "(" .. began) > 0 then
		return {0, math.max(1, redis.call("PTTL", turn))} -- the readers' turn
	end
	redis.call("DEL", turn)
end
-- ahead counts the waiting writers in its place's order before it: a
-- smaller priority, or the same with a smaller id.
local ahead
if waiter ~= "" and life > 0 then
	ahead = redis.call("ZCOUNT", writers, "-inf", "(" .. priority)
	for _, id in ipairs(redis.call("ZRANGEBYSCORE", writers, priority, priority)) do
		if id < waiter then
			ahead = ahead + 1
		end
	end
else
	ahead = redis.call("ZCARD", writers)
end
if ahead > 0 then
	return {0, lapseMs(writersDue, now)} -- writers before it
end
redis.call("SET", writer, token, "PX", ttl)
-- The marker refuses a mutex on the name while anyone holds it.
if not m or redis.call("PTTL", mutex) < tonumber(ttl) then
	redis.call("SET", mutex, marker, "PX", ttl)
end
-- Its place stays until the call leaves (rw_release.lua): should this
-- round fail on too many nodes, it is still first where it took the lock.
-- It lapses no later than the hold, should the leave not come.
if waiter ~= "" and life > 0 then
	redis.call("ZADD", writersDue, "XX", "LT", now + tonumber(ttl) * 1000, waiter)
end
return 1
