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

-- lapseMs is how long (ms) until the next of the places in due lapses
-- (due holds when each lapses), at least 1: a refused call that waits
-- behind them asks again by then, should one have died without leaving;
-- -1 when there is none.
local function lapseMs(due, now)
	local next = redis.call("ZRANGEBYSCORE", due, "-inf", "+inf", "LIMIT", 0, 1, "WITHSCORES")
	if #next == 0 then
		return -1
	end
	return math.max(1, math.ceil((tonumber(next[2]) - now) / 1000))
end
