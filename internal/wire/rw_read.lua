-- Read-write lock, a reader (rw_queue.lua comes first). Phase-fair: while no writer waits, readers
-- share the lock freely; once a writer waits, new readers wait behind it,
-- and when a writer releases, the readers that waited since before that
-- release go in together (the readers' turn) before the next writer.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local writers = KEYS[3] -- sorted set: waiting writer id by priority, smaller first
local mutex = KEYS[4] -- the name as a mutex's key: a name is one kind of lock
local writersDue = KEYS[5] -- sorted set: waiting writer id by the node time (µs) its place lapses
local waiting = KEYS[6] -- sorted set: waiting reader id by the node time (µs) it first waited
local waitingDue = KEYS[7] -- sorted set: waiting reader id by the node time (µs) its place lapses
local turn = KEYS[8] -- the node time (µs) of the writer's release that began the readers' turn
local token = ARGV[1] -- the owner token
local ttl = tonumber(ARGV[2]) -- the TTL in ms
local marker = ARGV[3] -- what the mutex key holds while the read-write lock is held
local waiter = ARGV[4] or "" -- the waiting reader's id; "" for a call that does not wait
local life = tonumber(ARGV[5] or "0") -- how long (ms) a refused waiting reader's place lasts

-- Returns 1 when the reader joined; {0, pttl} when a writer holds the
-- lock (pttl its ms left) or waits for it (pttl the ms until the next
-- waiting writer's place lapses, unless its call asks again); {4} when a mutex
-- holds the name.
local m = redis.call("GET", mutex)
if m and m ~= marker then
	return {4}
end
local t = redis.call("TIME")
local now = t[1] * 1000000 + t[2]
prune(writers, writersDue, now)
prune(waiting, waitingDue, now)
local function refuse(pttl)
	if waiter ~= "" and life > 0 then
		redis.call("ZADD", waiting, "NX", now, waiter)
		redis.call("ZADD", waitingDue, now + life * 1000, waiter)
		for _, k in ipairs({waiting, waitingDue}) do
			if redis.call("PTTL", k) < life then
				redis.call("PEXPIRE", k, life)
			end
		end
	end
	return {0, pttl}
end
local p = redis.call("PTTL", writer)
if p ~= -2 then
	return refuse(p)
end
if redis.call("ZCARD", writers) > 0 then
	-- A writer waits: only a reader whose turn it is goes in.
	-- When it first waited here (ZADD XX INCR 0 reads it and changes
	-- nothing; false when it did not).
	local since = waiter ~= "" and redis.call("ZADD", waiting, "XX", "INCR", 0, waiter)
	local began = redis.call("GET", turn)
	if not (since and began and tonumber(since) < tonumber(began)) then
		return refuse(lapseMs(writersDue, now))
	end
end
-- A waiting reader's place stays until its hold's release or the call's
-- leave (rw_release.lua): should this round fail on too many nodes, its
-- turn still holds here. A hold that ends without a release takes the
-- place with it: it lapses no later than the hold.
if waiter ~= "" then
	redis.call("ZADD", waitingDue, "XX", "LT", now + ttl * 1000, waiter)
end
local nowMs = math.floor(now / 1000)
redis.call("HSET", readers, token, nowMs + ttl)
if redis.call("PTTL", readers) < ttl then
	redis.call("PEXPIRE", readers, ttl)
end
-- The marker refuses a mutex on the name while anyone holds it.
if not m or redis.call("PTTL", mutex) < ttl then
	redis.call("SET", mutex, marker, "PX", ttl)
end
return 1
