-- Write back a fence: the counter takes the fence only when the fence is
-- above it. The counter has no TTL: it must outlive every lock on the key.
-- KEYS[1] the fence counter ("<key>:fence"); ARGV[1] the fence.
-- Returns 1 when the fence was above the counter and is stored; {0,
-- counter} when the counter already was the fence or more (an earlier
-- holder's write-back got here first): the caller must mint a larger one.
local raw = redis.call("GET", KEYS[1]) or "0"
local cur = tonumber(raw)
local f = tonumber(ARGV[1])
if cur == nil or f == nil then
	return redis.error_reply("redlock: fence counter " .. KEYS[1] .. " is not a number")
end
if f > cur then
	redis.call("SET", KEYS[1], ARGV[1])
	return 1
end
return {0, raw}
