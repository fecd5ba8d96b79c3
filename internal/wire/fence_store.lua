-- Write back a fence: the counter takes the fence only when the fence is
-- above it. The counter has no TTL: it must outlive every lock on the key.
local counter = KEYS[1] -- the fence counter of the lock key
local fence = ARGV[1] -- the fence

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
	redis.call("SET", counter, fence)
	return 1
end
return {0, raw}
