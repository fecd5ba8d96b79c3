-- Leave: take a waiter out of a key's queue. A reservation of the lock key
-- for it passes to the next live waiter (or the key is freed), and that
-- is announced, as a release would be (see release.lua).
-- KEYS[1] the waiters (sorted set); KEYS[2] the waiters' deadlines (hash);
-- KEYS[3] the lock key. ARGV[1] the waiter id; ARGV[2] the reservation
-- window in ms.
-- Returns 1.
redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("HDEL", KEYS[2], ARGV[1])
if redis.call("GET", KEYS[3]) ~= "redlock:reserved:" .. ARGV[1] then
	return 1
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local next = ""
for _ = 1, 64 do
	local head = redis.call("ZRANGE", KEYS[1], 0, 0)[1]
	if not head then
		break
	end
	local deadline = tonumber(redis.call("HGET", KEYS[2], head))
	if deadline and deadline > now then
		next = head
		break
	end
	redis.call("ZREM", KEYS[1], head)
	redis.call("HDEL", KEYS[2], head)
end
if next ~= "" then
	redis.call("SET", KEYS[3], "redlock:reserved:" .. next, "PX", ARGV[2])
else
	redis.call("DEL", KEYS[3])
end
if next == "" then
	redis.call("PUBLISH", "redlock:released:" .. KEYS[3], "")
else
	local cid = string.match(next, "^([^.]*)%.") or ""
	redis.call("PUBLISH", "redlock:handoff:" .. cid .. ":" .. KEYS[3], next)
end
return 1
