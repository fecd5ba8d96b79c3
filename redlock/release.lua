-- Release: give up the lock key only while it holds what the caller owns,
-- keep it for the longest waiter for a short window, and announce it.
-- Unlock and failed rounds give up their token; a waiting Lock that gives
-- up gives up a reservation kept for it ("redlock:reserved:<id>"), if any,
-- and leaves the queue.
-- KEYS[1] the lock key; KEYS[2] the waiters (sorted set by priority);
-- KEYS[3] the waiters' deadlines (hash, node time in µs).
-- ARGV[1] the value the caller owns; ARGV[2] the reservation window in
-- ms, 0 for none; ARGV[3] the caller's queue id, "" for none: it leaves
-- the queue even on a node where the key is not its own.
-- With a live waiter queued and a window, the key is not deleted but set
-- to "redlock:reserved:<id>" for the window: SET NX from anyone fails, the
-- acquisition script lets that waiter in. That is announced to the
-- waiter's Client alone, on "redlock:handoff:<client>:<key>" with the
-- waiter's id; a key left free is announced to everyone on
-- "redlock:released:<key>" with an empty message.
-- Returns 1 when the key held ARGV[1] and is given up, 0 otherwise.
if ARGV[3] ~= "" then
	redis.call("ZREM", KEYS[2], ARGV[3])
	redis.call("HDEL", KEYS[3], ARGV[3])
end
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
local next = ""
if tonumber(ARGV[2]) > 0 and redis.call("ZRANGE", KEYS[2], 0, 0)[1] then
	local t = redis.call("TIME")
	local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
	-- Stale entries (waiters that left without saying so) are dropped
	-- from the head of the queue; a bounded number per release.
	for _ = 1, 64 do
		local head = redis.call("ZRANGE", KEYS[2], 0, 0)[1]
		if not head then
			break
		end
		local deadline = tonumber(redis.call("HGET", KEYS[3], head))
		if deadline and deadline > now then
			next = head
			break
		end
		redis.call("ZREM", KEYS[2], head)
		redis.call("HDEL", KEYS[3], head)
	end
end
if next ~= "" then
	redis.call("SET", KEYS[1], "redlock:reserved:" .. next, "PX", ARGV[2])
else
	redis.call("DEL", KEYS[1])
end
if next == "" then
	redis.call("PUBLISH", "redlock:released:" .. KEYS[1], "")
else
	-- Only the Client of the waiter (its id is "<client>.<n>") hears it.
	local cid = string.match(next, "^([^.]*)%.") or ""
	redis.call("PUBLISH", "redlock:handoff:" .. cid .. ":" .. KEYS[1], next)
end
return 1
