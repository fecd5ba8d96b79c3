-- Acquire: SET key token NX PX ttl, unless the key is reserved for a
-- waiter other than the caller. A refused caller that waits is queued, so
-- that the next release reserves the key for the longest waiter.
-- KEYS[1] the lock key; KEYS[2] the waiters (sorted set: waiter id by
-- priority, smaller first); KEYS[3] the waiters' deadlines (hash: waiter
-- id -> node time in µs after which the entry is stale); KEYS[4] the
-- reservation (the id of the waiter the key is kept for, with a TTL).
-- With fencing, also KEYS[5] the fence counter and KEYS[6] the node epoch.
-- ARGV[1] the owner token; ARGV[2] the TTL in ms; ARGV[3] the waiter id,
-- "" for a caller that does not wait; ARGV[4] the waiter's priority in µs,
-- "" to take the node's time; ARGV[5] how long (ms) a waiter's entry
-- outlives the time it was told to come back; with fencing ARGV[6] a
-- random epoch, stored only when the node has none yet.
-- Returns {1} when acquired, {1, counter, epoch} with fencing;
-- {0, pttl, priority} when the key is held, pttl its ms left;
-- {2, pttl, priority} when it is free but reserved for another waiter,
-- pttl the reservation's ms left. priority is the caller's in the queue,
-- -1 when it does not wait.
local id = ARGV[3]
local kept = redis.call("GET", KEYS[4])
if (not kept or kept == id) and redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	if kept then
		redis.call("DEL", KEYS[4])
	end
	if id ~= "" then
		redis.call("ZREM", KEYS[2], id)
		redis.call("HDEL", KEYS[3], id)
	end
	if #KEYS == 6 then
		redis.call("SET", KEYS[6], ARGV[6], "NX")
		return {1, redis.call("GET", KEYS[5]) or "0", redis.call("GET", KEYS[6])}
	end
	return {1}
end
local code, pttl = 0, redis.call("PTTL", KEYS[1])
if pttl == -2 then
	code, pttl = 2, redis.call("PTTL", KEYS[4])
end
if id == "" then
	return {code, pttl, -1}
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local prio = tonumber(ARGV[4])
if prio then
	redis.call("ZADD", KEYS[2], prio, id)
else
	redis.call("ZADD", KEYS[2], "NX", now, id)
	prio = tonumber(redis.call("ZSCORE", KEYS[2], id))
end
local keep = math.max(pttl, 0) + tonumber(ARGV[5])
redis.call("HSET", KEYS[3], id, now + keep * 1000)
for i = 2, 3 do
	if redis.call("PTTL", KEYS[i]) < keep then
		redis.call("PEXPIRE", KEYS[i], keep)
	end
end
return {code, pttl, prio}
