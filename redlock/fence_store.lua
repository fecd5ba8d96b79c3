-- Store a fence: counter = max(counter, fence). The counter has no TTL:
-- it must outlive every lock on the key. Equal values leave it as is.
-- KEYS[1] the fence counter ("<key>:fence"); ARGV[1] the fence.
-- Returns 1 (the node now holds a counter >= the fence).
local cur = tonumber(redis.call("GET", KEYS[1]) or "0")
local f = tonumber(ARGV[1])
if cur == nil or f == nil then
	return redis.error_reply("redlock: fence counter " .. KEYS[1] .. " is not a number")
end
if f > cur then
	redis.call("SET", KEYS[1], ARGV[1])
end
return 1
