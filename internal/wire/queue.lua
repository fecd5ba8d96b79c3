-- The waiters' queue, shared by acquire.lua and release.lua: this source
-- comes first in each of them, and names the keys and the first five
-- arguments, which the two scripts take alike. Each script's own
-- arguments follow, from ARGV[6].
local key = KEYS[1] -- the lock key
local waiters = KEYS[2] -- sorted set: waiter id by priority, smaller first
local entries = KEYS[3] -- hash: waiter id -> entry (below)
local reservedPrefix = ARGV[1] -- the value that keeps the key for waiter w is reservedPrefix .. w
local handoffPrefix = ARGV[2] -- a hand-off to waiter "<client>.<n>" is announced on
local handoffTail = ARGV[3] -- handoffPrefix .. <client> .. handoffTail
local window = ARGV[4] -- the reservation window in ms, "0" for none (then the key goes to no waiter)
local slack = tonumber(ARGV[5]) -- how long (ms) an entry outlives the time its waiter is due back

-- An entry is "<deadline> <round> <ttl> <hand-off token>", or "<deadline>"
-- alone for a waiter that takes no hand-off; the deadline is the node
-- time in µs after which the entry is stale.

-- announce publishes msg on ch. A node that refuses (a user without the
-- PUBLISH permission) does not undo the script: the refusal is kept in
-- refused, and the release reports it.
local refused = nil
local function announce(ch, msg)
	local r = redis.pcall("PUBLISH", ch, msg)
	if type(r) == "table" and r.err then
		refused = r.err
	end
end

-- clock returns the node's time in µs.
local function clock()
	local t = redis.call("TIME")
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- entry reads a waiter's entry: its deadline, and its latest round, TTL
-- and hand-off token when it takes hand-offs (round 0 otherwise).
local function entry(w)
	local s = redis.call("HGET", entries, w)
	if not s then
		return nil
	end
	local d, r, ttl, tok = string.match(s, "^(%d+) (%d+) (%d+) (.+)$")
	if d then
		return tonumber(d), tonumber(r), ttl, tok
	end
	return tonumber(s), 0
end

-- outlive makes the queue last ttl ms at least: as long as its newest
-- entry, or a hand-off token just given (the entry's round, which refuses
-- the waiter's late rounds, then lasts as long as the token). A key that
-- falls short gets twice ttl, so that on a busy key most calls find it
-- long enough and write nothing.
local function outlive(ttl)
	ttl = tonumber(ttl)
	if redis.call("PTTL", waiters) < ttl then
		redis.call("PEXPIRE", waiters, 2 * ttl)
	end
	if redis.call("PTTL", entries) < ttl then
		redis.call("PEXPIRE", entries, 2 * ttl)
	end
end

-- giveToHead gives the lock key (free, or being released by its holder)
-- to the longest live waiter, unless that waiter is except, and returns
-- the key's new value; nil when it gave the key to no one and left it as
-- it was. A waiter with a hand-off token gets it, with the waiter's
-- TTL, and holds the key here without asking again; its entry then runs
-- out after slack ms at most (half its TTL at most), as for a round that
-- wins, should the waiter be gone. A waiter without one gets a
-- reservation (reservedPrefix .. its id) for window ms: SET NX from
-- anyone fails, and the acquisition script lets that waiter in. Either is
-- announced to the waiter's Client alone, on its hand-off channel:
-- "<id> <round>" for a hand-off (the waiter's latest round that ran
-- here), "<id>" for a reservation. Stale entries (waiters that left
-- without saying so) are dropped from the head of the queue on the way, a
-- bounded number per call. now is the node time in µs, or nil to read it
-- when needed.
local function giveToHead(now, except)
	for _ = 1, 64 do
		local head = redis.call("ZRANGE", waiters, 0, 0)[1]
		if not head then
			return nil
		end
		now = now or clock()
		local deadline, r, ttl, tok = entry(head)
		if deadline and deadline > now then
			if head == except then
				return nil
			end
			local ch = handoffPrefix .. (string.match(head, "^([^.]*)%.") or "") .. handoffTail
			if tok then
				redis.call("SET", key, tok, "PX", ttl)
				local k = math.min(slack, math.floor(tonumber(ttl) / 2))
				redis.call("HSET", entries, head, string.format("%.0f %d %s %s", now + k * 1000, r, ttl, tok))
				outlive(ttl)
				announce(ch, head .. " " .. r)
				return tok
			end
			local v = reservedPrefix .. head
			redis.call("SET", key, v, "PX", window)
			announce(ch, head)
			return v
		end
		redis.call("ZREM", waiters, head)
		redis.call("HDEL", entries, head)
	end
	return nil
end

-- giveUp gives the lock key up as a release does: to the longest waiter
-- when the window allows (giveToHead), or deleted and announced on
-- releaseChannel with an empty message. It returns the reply of a
-- release that gave the key up: 1, or {1, error} when the node refused to
-- announce it (PUBLISH denied).
local function giveUp(releaseChannel)
	if not (tonumber(window) > 0 and giveToHead(nil, nil)) then
		redis.call("DEL", key)
		announce(releaseChannel, "")
	end
	if refused then
		return {1, refused}
	end
	return 1
end
