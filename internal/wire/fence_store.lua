-- Write back a fence: the key's counter takes the fence only when the
-- fence is above it (above the slot's floor when the key has no counter:
-- it expired, or never was), and lives for ttl; the slot's floor keeps
-- the largest fence of any key of the slot, without a TTL. A key's fence
-- is read as the larger of the two (fence_read.lua), so that a node keeps
-- one floor per slot rather than a counter per key ever fenced, and a
-- fence below an earlier lock's is refused whether or not that lock's
-- counter is still there.
local counter = KEYS[1] -- the fence counter of the lock key
local floor = KEYS[2] -- the floor of the key's hash slot
local fence = ARGV[1] -- the fence
local ttl = ARGV[2] -- the counter's TTL in ms

-- Returns 1 when the fence was above the counter and is stored; {0,
-- counter} when the counter already was the fence or more (an earlier
-- holder's write-back got here first): the caller must mint a larger one.
local raw = redis.call("GET", counter) or redis.call("GET", floor) or "0"
local cur = tonumber(raw)
local f = tonumber(fence)
if cur == nil or f == nil then
	return redis.error_reply("redlock: fence counter " .. counter .. " (or its slot's floor) is not a number")
end
if f > cur then
	redis.call("SET", counter, fence, "PX", ttl)
	if f > (tonumber(redis.call("GET", floor) or "0") or 0) then -- a floor that is not a number is replaced
		redis.call("SET", floor, fence)
	end
	return 1
end
return {0, raw}
