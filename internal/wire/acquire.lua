-- Acquire for a caller that may wait: SET key token PX ttl when the key is
-- free, or when it holds a reservation or a hand-off for this caller. A
-- refused caller that waits is queued, so that the key goes to the longest
-- waiter.
-- queue.lua comes first: it names KEYS[1..2] (key, queue); then
-- place.lua.
local fenceKey = KEYS[3] -- with fencing: the fence counter; nil without
local epochKey = KEYS[4] -- with fencing: the node's epoch; nil without
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the TTL in ms
local id = ARGV[3] -- the waiter id, "" for a caller that does not wait
local prio = ARGV[4] -- the wall-clock time (µs) the wait began, the same for every node
local waited = ARGV[5] -- how long (µs) the waiter has waited by its own monotonic clock
local sec = ARGV[6] -- the client's wall-clock time when it sent the round (prio + waited), in whole seconds
local round = ARGV[7] -- the number of this round among the waiter's rounds
local mine = ARGV[8] -- the waiter's hand-off token, "" for none
local window = ARGV[9] -- the reservation window in ms, "0" for none (then the key goes to no waiter)
local life = ARGV[10] -- how long (ms) the entry of a refused waiter lasts: it is back by then
local kept = ARGV[11] -- how long (ms) the entry lasts after this round took the key
local epoch = ARGV[12] -- with fencing: a random epoch, stored only when the node has none yet
local rwMarker = "redlock:rwlock" -- what the key holds while a read-write lock holds the name (keys.go)

-- A release gives the key to the head of the queue (giveToHead,
-- queue.lua), and so does a waiter that finds the key free while an older
-- waiter is queued (the holder's key ran out, nobody released it).
-- A round replaces a value that names an older round of the same waiter
-- (the round's own token "<hand-off token>/<round>", or a hand-off that
-- followed it, "<hand-off token>/h<round>") with its token; a round not
-- newer than the one named arrived late: it must not take back what the
-- waiter was told it holds, nor queue the waiter again.
-- Returns 1 when acquired, {1, counter, epoch} with fencing; {0, pttl}
-- when the key is held, pttl its ms left (-1: no TTL); {2, pttl} when it
-- is reserved for another waiter, pttl the reservation's ms left; {4}
-- when a read-write lock holds the name.
local v = redis.call("GET", key)
if not v and id ~= "" and window ~= "0" then
	v = giveToHead(window, id)
end
local entry = queue .. ":" .. id

local own = not v or (id ~= "" and #v == #reservedPrefix + #id and v == reservedPrefix .. id)
if not own and mine ~= "" and string.find(v, mine, 1, true) == 1 and string.byte(v, #mine + 1) == 47 then -- "/"
	-- The waiter holds the key here, by a round or a hand-off. This round
	-- takes it over when it is newer; otherwise it is late (the waiter
	-- may count the hand-off as held), is refused, and writes nothing.
	local r = tonumber(string.match(v, "^h?(%d+)$", #mine + 2))
	if not r or r >= tonumber(round) then
		return {0, redis.call("PTTL", key)}
	end
	own = true
end
local reply
if own then
	redis.call("SET", key, token, "PX", ttl)
	reply = 1
	if epochKey then
		redis.call("SET", epochKey, epoch, "NX")
		reply = {1, fenceOf(fenceKey, epochKey), redis.call("GET", epochKey)}
	end
else
	if v == rwMarker then
		return {4}
	end
	reply = {0, redis.call("PTTL", key)}
	if string.find(v, reservedPrefix, 1, true) == 1 then
		reply[1] = 2
	end
end
if id == "" then
	return reply
end

-- The waiter's place: the priority it sent, or, when the client's clock is
-- more than a second off the node's, where the node's clock and the time
-- waited place it (placed, place.lua). Its entry holds this round, and the
-- queue lasts as long as the entry. A refused waiter is queued until it is
-- due back. A waiter that took the key stays queued, if it was, for a
-- little while: its round may yet fail on the other nodes, and then it
-- asks again soon. If it got the lock, its release takes it out of the
-- queue, or the entry runs out, well before the lock does (a holder that
-- dies must not be at the head of the queue when its key expires). The
-- entry is written last and the queue's TTL right after ZADD, so that a
-- node that refuses ZADD or TIME (ACL) keeps neither an entry, which a
-- round that takes the key there would then have to queue again, nor a
-- queue without a TTL.
local e = round
if mine ~= "" then
	e = round .. " " .. ttl .. " " .. mine
end
if own then
	if not redis.call("SET", entry, e, "PX", kept, "XX") then
		return reply
	end
end
local added = redis.call("ZADD", queue, "NX", prio, id) == 1
redis.call("PEXPIRE", queue, life)
if added then
	local p = placed(prio, waited, sec, redis.call("TIME"))
	if p ~= prio then
		redis.call("ZADD", queue, "XX", p, id)
	end
end
if not own then
	redis.call("SET", entry, e, "PX", life)
end
return reply
