-- Acquire for a caller that may wait: SET key token PX ttl when the key is
-- free, or when it holds a reservation or a hand-off for this caller. A
-- refused caller that waits is queued, so that the key goes to the longest
-- waiter.
-- queue.lua comes first: it names KEYS[1..3] (key, waiters, entries) and
-- ARGV[1..5] (reservedPrefix, handoffPrefix, handoffTail, window, slack).
local fenceKey = KEYS[4] -- with fencing: the fence counter; nil without
local epochKey = KEYS[5] -- with fencing: the node's epoch; nil without
local token = ARGV[6] -- the owner token
local ttl = ARGV[7] -- the TTL in ms
local id = ARGV[8] -- the waiter id, "" for a caller that does not wait
local prio = tonumber(ARGV[9]) -- the wall-clock time (µs) the wait began, the same for every node
local waited = tonumber(ARGV[10]) -- how long (µs) the waiter has waited by its own monotonic clock
local refresh = tonumber(ARGV[11]) -- the longest (ms) a waiter sleeps between rounds
local round = tonumber(ARGV[12]) -- the number of this round among the waiter's rounds
local mine = ARGV[13] -- the waiter's hand-off token, "" for none
local epoch = ARGV[14] -- with fencing: a random epoch, stored only when the node has none yet; "" without
local rwMarker = ARGV[15] -- what the key holds while a read-write lock holds the name

-- A release gives the key to the head of the queue (giveToHead,
-- queue.lua), and so does a waiter that finds the key free while an older
-- waiter is queued (the holder's key ran out, nobody released it).
-- A round replaces the waiter's own hand-off token with its token, unless
-- a later round of the waiter already ran here, or the waiter has no entry
-- here: a round that arrives late must not take back what the waiter was
-- told it holds, nor queue the waiter again.
-- Returns 1 when acquired, {1, counter, epoch} with fencing; {0, pttl}
-- when the key is held, pttl its ms left (-1: no TTL); {2, pttl} when it
-- is reserved for another waiter, pttl the reservation's ms left; {4}
-- when a read-write lock holds the name.
local v = redis.call("GET", key)
local now = 0
if id ~= "" then
	now = clock()
end

if not v and id ~= "" and tonumber(window) > 0 then
	v = giveToHead(now, id)
end

local last = 0 -- the latest round of this waiter that ran here
local queued = false
if id ~= "" then
	local d, r = entry(id)
	queued, last = d ~= nil, r or 0
end
-- record is this waiter's entry, with deadline d (µs).
local function record(d)
	if mine == "" then
		return string.format("%.0f", d)
	end
	return string.format("%.0f %d %s %s", d, math.max(last, round), ttl, mine)
end

local own = not v or (id ~= "" and v == reservedPrefix .. id)
if not own and mine ~= "" and v == mine then
	-- A hand-off to this waiter. Without an entry (the waiter's release
	-- took it out), or after a later round, this round is late: the waiter
	-- may count the hand-off as held. Without an entry, it does not queue
	-- the waiter again either.
	if not queued then
		return {0, redis.call("PTTL", key)}
	end
	own = last < round
end
if own then
	redis.call("SET", key, token, "PX", ttl)
	-- The caller stays queued, for a little while: its round may yet fail
	-- on the other nodes, and then it asks again soon. If it got the lock,
	-- its release takes it out of the queue, or the entry runs out, well
	-- before the lock does (a holder that dies must not be at the head of
	-- the queue when its key expires).
	if queued then
		local keep = math.min(slack, math.floor(tonumber(ttl) / 2))
		redis.call("HSET", entries, id, record(now + keep * 1000))
	end
	if epochKey then
		redis.call("SET", epochKey, epoch, "NX")
		return {1, redis.call("GET", fenceKey) or "0", redis.call("GET", epochKey)}
	end
	return 1
end
if v == rwMarker then
	return {4}
end
local code, pttl = 0, redis.call("PTTL", key)
if string.sub(v, 1, #reservedPrefix) == reservedPrefix then
	code = 2
end
if id == "" then
	return {code, pttl}
end
-- A client clock more than a second off the node's is not trusted: the
-- wait is then placed by the node's clock and the time waited.
local began = now - waited
if math.abs(prio - began) > 1000000 then
	prio = began
end
redis.call("ZADD", waiters, "NX", prio, id)
-- The waiter comes back when the key runs out, or sooner.
local keep = math.min(math.max(pttl, 0), refresh) + slack
redis.call("HSET", entries, id, record(now + keep * 1000))
outlive(keep)
return {code, pttl}
