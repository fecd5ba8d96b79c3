-- Semaphore inspection: what a node holds for a semaphore, read and
-- nothing written.
local n = #KEYS - 2 -- the permits: KEYS[1..n] are the slots
local permitsKey = KEYS[n + 1] -- the semaphore's size, as the first Client set it
local waiters = KEYS[n + 2] -- the queue of waiting Acquire calls (sorted set)

-- Returns {size or false, queued, then for each slot its value or false
-- and its PTTL (-2: no key, -1: no TTL)}.
local out = {redis.call("GET", permitsKey), redis.call("ZCARD", waiters)}
for i = 1, n do
	out[#out + 1] = redis.call("GET", KEYS[i])
	out[#out + 1] = redis.call("PTTL", KEYS[i])
end
return out
