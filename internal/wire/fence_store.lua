-- Write back a fence: the key's counter takes the fence only when the
-- fence is above it, and lives for ttl; the slot's floor keeps the
-- largest fence of any key of the slot, without a TTL. The counter
-- outlives every write-back of a lock that overlapped the one that
-- wrote it; the floor outlives the counter, so that a later lock's fence
-- is larger all the same (fence_read.lua), with one floor per slot
-- rather than a counter per key left on the node.
local counter = KEYS[1] -- the fence counter of the lock key
local floor = KEYS[2] -- the floor of the key's hash slot
local fence = ARGV[1] -- the fence
local ttl = ARGV[2] -- the counter's TTL in ms

-- Returns 1 when the fence was above the counter and is stored; {0,
-- counter} when the counter already was the fence or more (an earlier
-- holder's write-back got here first): the caller must mint a larger one.
local raw = redis.call("GET", counter) or "0"
local cur = tonumber(raw)
local f = tonumber(fence)
if cur == nil or f == nil then
	return redis.error_reply("redlock: fence counter " .. counter .. " is not a number")
end
if f > cur then
	redis.call("SET", counter, fence, "PX", ttl)
	if f > (tonumber(redis.call("GET", floor) or "0") or 0) then
		redis.call("SET", floor, fence)
	end
	return 1
end
return {0, raw}
