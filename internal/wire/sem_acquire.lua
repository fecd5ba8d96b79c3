-- Semaphore acquisition: take the first free permit slot, in the order of
-- the slots, which every node shares, so that the nodes grant the same
-- slot when nothing is in flight. Each slot is a lock key of its own: a
-- permit is a slot granted by a quorum, exactly as a lock is.
local n = #KEYS - 1 -- the permits: KEYS[1..n] are the slots
local permitsKey = KEYS[n + 1] -- the semaphore's size, as the first Client set it
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the TTL in ms
local prefer = tonumber(ARGV[3]) -- a slot (from 0) to try first, -1 for none

-- Returns slot + 1 when a slot was taken (slot from 0; an integer, the
-- cheapest reply); {0, pttl} when every slot is held, pttl the least ms
-- one of them has left (-1: a slot without TTL); {3, size} when the
-- semaphore has another size here.
local size = redis.call("GET", permitsKey)
if not size then
	redis.call("SET", permitsKey, n)
elseif tonumber(size) ~= n then
	return {3, size}
end
local function take(i)
	if redis.call("SET", KEYS[i], token, "NX", "PX", ttl) then
		return i
	end
	return nil
end
local got = prefer >= 0 and prefer < n and take(prefer + 1)
if got then
	return got
end
for i = 1, n do
	got = take(i)
	if got then
		return got
	end
end
local least = -1
for i = 1, n do
	local p = redis.call("PTTL", KEYS[i])
	if p >= 0 and (least < 0 or p < least) then
		least = p
	end
end
return {0, least}
