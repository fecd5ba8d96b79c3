-- Release: give up the lock key only while it holds what the caller owns,
-- give it to the longest waiter, and announce it.
-- Unlock and failed rounds give up their token; a waiting Lock that gives
-- up gives up what was handed to it, if anything, and leaves the queue.
-- KEYS[1] the lock key; KEYS[2] the waiters (sorted set by priority);
-- KEYS[3] the waiters' entries (hash, see acquire.lua).
-- ARGV[1] the value the caller owns; ARGV[2] the reservation window in
-- ms, 0 for none; ARGV[3] the caller's queue id, "" for none: it leaves
-- the queue even on a node where the key is not its own; ARGV[4] a second
-- value the caller owns, "" for none (the hand-off token of a waiter that
-- won by a round); ARGV[5] how long (ms) a waiter's entry outlives a
-- hand-off at most.
-- With a live waiter queued and a window, the key is not deleted. A
-- waiter with a hand-off token gets it: the key is set to that token with
-- the waiter's TTL, and the waiter holds it here without asking again. A
-- waiter without one gets "redlock:reserved:<id>" for the window: SET NX
-- from anyone fails, the acquisition script lets that waiter in. Either is
-- announced to the waiter's Client alone, on
-- "redlock:handoff:<client>:<key>": "<id> <round>" for a hand-off (the
-- waiter's latest round that ran here), "<id>" for a reservation. A key
-- left free is announced to everyone on "redlock:released:<key>" with an
-- empty message.
-- Returns 1 when the key held what the caller owns and is given up, 0
-- otherwise.
if ARGV[3] ~= "" then
	redis.call("ZREM", KEYS[2], ARGV[3])
	redis.call("HDEL", KEYS[3], ARGV[3])
end
local v = redis.call("GET", KEYS[1])
if v ~= ARGV[1] and (ARGV[4] == "" or v ~= ARGV[4]) then
	return 0
end
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
		local s = redis.call("HGET", KEYS[3], head)
		local d, r, ttl, tok = string.match(s or "", "^(%d+) (%d+) (%d+) (.+)$")
		if not d then
			d = s
		end
		if d and tonumber(d) > now then
			-- Only the Client of the waiter (its id is "<client>.<n>")
			-- hears it.
			local cid = string.match(head, "^([^.]*)%.") or ""
			local ch = "redlock:handoff:" .. cid .. ":" .. KEYS[1]
			if tok then
				redis.call("SET", KEYS[1], tok, "PX", ttl)
				-- As for a round that wins: the entry runs out well
				-- before the key, should the waiter be gone.
				local keep = math.min(tonumber(ARGV[5]), math.floor(tonumber(ttl) / 2))
				redis.call("HSET", KEYS[3], head, string.format("%.0f %s %s %s", now + keep * 1000, r, ttl, tok))
				-- The queue lasts as long as the token: the entry's round
				-- refuses the waiter's late rounds (acquire.lua).
				for i = 2, 3 do
					if redis.call("PTTL", KEYS[i]) < tonumber(ttl) then
						redis.call("PEXPIRE", KEYS[i], ttl)
					end
				end
				redis.call("PUBLISH", ch, head .. " " .. r)
			else
				redis.call("SET", KEYS[1], "redlock:reserved:" .. head, "PX", ARGV[2])
				redis.call("PUBLISH", ch, head)
			end
			return 1
		end
		redis.call("ZREM", KEYS[2], head)
		redis.call("HDEL", KEYS[3], head)
	end
end
redis.call("DEL", KEYS[1])
redis.call("PUBLISH", "redlock:released:" .. KEYS[1], "")
return 1
