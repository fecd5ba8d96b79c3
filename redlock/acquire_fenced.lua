-- Acquire with a fence: SET NX PX the lock key and, in the same atomic
-- step, read the node's fence counter for the key and its epoch.
-- KEYS[1] the lock key; KEYS[2] the fence counter ("<key>:fence");
-- KEYS[3] the node's epoch key.
-- ARGV[1] the owner token; ARGV[2] the TTL in ms; ARGV[3] a random epoch,
-- stored only when the node has none yet.
-- Returns nil when the key is held by another owner, otherwise
-- {counter, epoch}: the counter is "0" when the node has none.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return false
end
redis.call("SET", KEYS[3], ARGV[3], "NX")
return {redis.call("GET", KEYS[2]) or "0", redis.call("GET", KEYS[3])}
