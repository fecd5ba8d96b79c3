-- The waiters' queue, shared by acquire.lua, release.lua and
-- force_release.lua: this source comes first in each of them, and names
-- the two keys that the three scripts take first. Each script's own keys
-- and arguments follow.
local key = KEYS[1] -- the lock key
local queue = KEYS[2] -- sorted set: waiter id by priority, smaller first

-- The names below are the protocol's constants (keys.go holds the same):
local reservedPrefix = "redlock:reserved:" -- the key kept for waiter w holds reservedPrefix .. w
local handoffPrefix = "redlock:handoff:" -- a hand-off to waiter "<client>.<n>" is announced on handoffPrefix .. <client> .. ":" .. key
local releasedPrefix = "redlock:released:" -- a key left free is announced on releasedPrefix .. key

-- A waiter's entry is a string key of its own, queue .. ":" .. its id (in
-- the lock key's hash slot: queue's name ends with the slot's tag), that
-- expires when the waiter is due back and is not: "<round> <ttl> <hand-off
-- token>", the waiter's latest round that ran here, its TTL in ms and its
-- hand-off token, or "<round>" alone for a waiter that takes no hand-off.
-- A waiter new on the node is queued by its Client without a script, by a
-- transaction that writes what acquire.lua would (wire.QueueTx). Once a
-- release hands the key to the waiter, the waiter is no longer in the
-- queue, and its entry is left to run out. Every value is kept as the
-- string the Client sent: the scripts format no number.

-- giveToHead gives the lock key (free, or being released by its holder)
-- to the longest waiter whose entry is live, announces it, and returns
-- the key's new value, then the error of a node that refused to announce
-- it (a user without the PUBLISH permission: that does not undo the
-- script); nil when the queue has no live waiter, or when except heads it
-- (its round takes the key, and puts it back in the queue if its entry is
-- live: acquire.lua). The head leaves the queue, and waiters whose
-- entries ran out (they left without saying so) are dropped on the way,
-- 64 at most. A waiter with a hand-off token gets "<hand-off token>/h<round>",
-- naming its round that ran here last, with its TTL, and holds the key
-- here without asking again: a later round of it is refused unless it is
-- newer (acquire.lua), whatever became of the entry. The value differs
-- from that round's own token, "<hand-off token>/<round>", so that the
-- release a failed round owes (its own token) never gives away a hand-off
-- that followed it, which the waiter may count. A waiter
-- without one (a fenced one) gets a reservation (reservedPrefix .. its
-- id) for window ms: SET NX from anyone fails, and the acquisition
-- script lets that waiter in. Either is announced to the waiter's Client
-- alone, on its hand-off channel: "<id> <round>" for a hand-off (the
-- waiter's latest round that ran here), "<id>" for a reservation.
local function giveToHead(window, except)
	for _ = 1, 64 do
		local id = redis.call("ZPOPMIN", queue)[1]
		if not id or id == except then
			return nil
		end
		local entry = queue .. ":" .. id
		local e = redis.call("GET", entry)
		if e then
			local ch = handoffPrefix .. (string.match(id, "^([^.]*)%.") or "") .. ":" .. key
			local r, ttl, mine = string.match(e, "^(%d+) (%d+) (.+)$")
			local msg, v = id, nil
			if mine then
				v = mine .. "/h" .. r
				redis.call("SET", key, v, "PX", ttl)
				msg = id .. " " .. r
			else
				v = reservedPrefix .. id
				redis.call("SET", key, v, "PX", window)
			end
			local p = redis.pcall("PUBLISH", ch, msg)
			if type(p) == "table" then
				return v, p.err
			end
			return v
		end
	end
	return nil
end
