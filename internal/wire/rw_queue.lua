-- The places of a read-write lock's waiting calls, shared by rw_read.lua
-- and rw_write.lua: this source comes before each one's own.

-- prune drops the places of set that lapsed by now (the node's time,
-- µs): due holds when each lapses. A bounded number per call.
local function prune(set, due, now)
	local stale = redis.call("ZRANGEBYSCORE", due, "-inf", now, "LIMIT", 0, 64)
	if #stale > 0 then
		redis.call("ZREM", set, unpack(stale))
		redis.call("ZREM", due, unpack(stale))
	end
end

-- lapseMs is how long (ms) until the place of set's first member lapses
-- (due holds when each lapses), at least 1: a refused call that waits
-- behind it asks again by then, should it have died without leaving;
-- -1 when set is empty.
local function lapseMs(set, due, now)
	local first = redis.call("ZRANGE", set, 0, 0)[1]
	if not first then
		return -1
	end
	local at = tonumber(redis.call("ZSCORE", due, first) or "0")
	return math.max(1, math.ceil((at - now) / 1000))
end
