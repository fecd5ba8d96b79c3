-- Acquire for a caller that may wait: SET key token PX ttl when the key is
-- free, or when it holds a reservation or a hand-off for this caller. A
-- refused caller that waits is queued, so that the key goes to the longest
-- waiter.
-- KEYS[1] the lock key, KEYS[2] the waiters and KEYS[3] their entries
-- (see queue.lua); with fencing also KEYS[4] the fence counter and
-- KEYS[5] the node epoch.
-- ARGV[1] the owner token; ARGV[2] the TTL in ms; ARGV[3] the waiter id,
-- "" for a caller that does not wait; ARGV[4] the waiter's priority: the
-- wall-clock time (µs) its wait began, the same for every node; ARGV[5]
-- how long (µs) it has waited by its own monotonic clock; ARGV[6] the
-- longest (ms) a waiter sleeps between rounds; ARGV[7] how long (ms) its
-- entry outlives the time it comes back by; ARGV[8] the reservation
-- window in ms (0 for none); ARGV[9] the number of this round among the
-- waiter's rounds; ARGV[10] the waiter's hand-off token, "" for none;
-- with fencing ARGV[11] a random epoch, stored only when the node has none
-- yet.
-- A release gives the key to the head of the queue (giveToHead,
-- queue.lua), and so does a waiter that finds the key free while an older
-- waiter is queued (the holder's key ran out, nobody released it).
-- A round replaces the waiter's own hand-off token with its token, unless
-- a later round of the waiter already ran here, or the waiter has no entry
-- here: a round that arrives late must not take back what the waiter was
-- told it holds, nor queue the waiter again.
-- Returns 1 when acquired, {1, counter, epoch} with fencing; {0, pttl}
-- when the key is held, pttl its ms left (-1: no TTL); {2, pttl} when it
-- is reserved for another waiter, pttl the reservation's ms left.
local id, round, mine = ARGV[3], tonumber(ARGV[9]), ARGV[10]
local v = redis.call("GET", KEYS[1])
local now = 0
if id ~= "" then
	now = clock()
end

if not v and id ~= "" and tonumber(ARGV[8]) > 0 then
	v = giveToHead(now, tonumber(ARGV[7]), ARGV[8], id)
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
	return string.format("%.0f %d %s %s", d, math.max(last, round), ARGV[2], mine)
end

local own = not v or (id ~= "" and v == "redlock:reserved:" .. id)
if not own and mine ~= "" and v == mine then
	-- A hand-off to this waiter. Without an entry (the waiter's release
	-- took it out), or after a later round, this round is late: the waiter
	-- may count the hand-off as held. Without an entry, it does not queue
	-- the waiter again either.
	if not queued then
		return {0, redis.call("PTTL", KEYS[1])}
	end
	own = last < round
end
if own then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	-- The caller stays queued, for a little while: its round may yet fail
	-- on the other nodes, and then it asks again soon. If it got the lock,
	-- its release takes it out of the queue, or the entry runs out, well
	-- before the lock does (a holder that dies must not be at the head of
	-- the queue when its key expires).
	if queued then
		local keep = math.min(tonumber(ARGV[7]), math.floor(tonumber(ARGV[2]) / 2))
		redis.call("HSET", KEYS[3], id, record(now + keep * 1000))
	end
	if #KEYS == 5 then
		redis.call("SET", KEYS[5], ARGV[11], "NX")
		return {1, redis.call("GET", KEYS[4]) or "0", redis.call("GET", KEYS[5])}
	end
	return 1
end
local code, pttl = 0, redis.call("PTTL", KEYS[1])
if string.sub(v, 1, 17) == "redlock:reserved:" then
	code = 2
end
if id == "" then
	return {code, pttl}
end
-- A client clock more than a second off the node's is not trusted: the
-- wait is then placed by the node's clock and the time waited.
local prio, began = tonumber(ARGV[4]), now - tonumber(ARGV[5])
if math.abs(prio - began) > 1000000 then
	prio = began
end
redis.call("ZADD", KEYS[2], "NX", prio, id)
-- The waiter comes back when the key runs out, or sooner.
local keep = math.min(math.max(pttl, 0), tonumber(ARGV[6])) + tonumber(ARGV[7])
redis.call("HSET", KEYS[3], id, record(now + keep * 1000))
outlive(keep)
return {code, pttl}
