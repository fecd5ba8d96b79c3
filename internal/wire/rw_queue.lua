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
