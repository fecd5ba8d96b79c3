-- Semaphore acquisition: take a free permit slot, in the order of the
-- slots, which every node shares, so that the nodes grant the same slot
-- when nothing is in flight. Each slot is a lock key of its own: a permit
-- is a slot granted by a quorum, exactly as a lock is. Waiting calls
-- queue by a priority their Client gives them (when they began to wait),
-- unless their Client's clock is more than a second off the node's
-- (place.lua, which comes first): a call takes a free slot only while
-- more slots are free than live waiters go before it, so a freed permit
-- goes to the longest waiter.
local n = tonumber(ARGV[4]) -- the permits: KEYS[1..n] are the slots
local permitsKey = KEYS[n + 1] -- the semaphore's size, as the first Client set it
local waiters = KEYS[n + 2] -- sorted set: waiter id by priority, smaller first
local due = KEYS[n + 3] -- sorted set: waiter id by the node time (µs) it is stale after
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the TTL in ms
local prefer = tonumber(ARGV[3]) -- a slot (from 0) to try first, -1 for none
-- The rest is absent for a call that neither waits nor is fenced.
local waiter = ARGV[5] or "" -- the waiting call's id; "" for a call that does not wait
local priority = ARGV[6] -- the waiting call's priority: when it began to wait, µs of its Client's wall clock
local waited = ARGV[7] -- how long (µs) the waiting call has waited by its Client's monotonic clock
local sec = ARGV[8] -- the Client's wall-clock time when it sent the round (priority + waited), in whole seconds
local life = tonumber(ARGV[9]) -- how long (ms) a refused waiter's place lasts unless it asks again
local epoch = ARGV[10] or "" -- with fencing: a random epoch, stored only when the node has none yet; "" without

-- Returns slot + 1 when a slot was taken (slot from 0; an integer, the
-- cheapest reply), {slot + 1, counter, epoch} with fencing (the slot's
-- fence counter, KEYS[n + 3 + slot + 1], and the node's epoch,
-- KEYS[2n + 4]); {0, pttl} when no slot is free for this call, pttl the
-- least ms a held slot has left (-1: unknown); {3, size} when the
-- semaphore has another size here.
local size = redis.call("GET", permitsKey)
if not size then
	redis.call("SET", permitsKey, n)
elseif tonumber(size) ~= n then
	return {3, size}
end

-- ahead counts the live waiters that go before this call, dropping stale
-- ones (a bounded number per call); t is the node's TIME and now the same
-- in µs, read only when someone waits. place is the waiting call's place
-- here: where it is queued, or, new here, where placed puts it (its
-- priority, or the node's clock less the time waited). ZADD XX INCR 0
-- reads a queued call's place and changes nothing (ZSCORE would be one
-- more command for the users' ACL rules). Places are whole µs: those
-- before place are those up to place - 1.
local ahead, t, now, place = 0, nil, nil, nil
local function clock()
	t = redis.call("TIME")
	now = t[1] * 1000000 + t[2]
end
if redis.call("ZCARD", waiters) > 0 then
	clock()
	local stale = redis.call("ZRANGEBYSCORE", due, "-inf", now, "LIMIT", 0, 64)
	if #stale > 0 then
		redis.call("ZREM", waiters, unpack(stale))
		redis.call("ZREM", due, unpack(stale))
	end
	if waiter == "" then
		ahead = redis.call("ZCARD", waiters)
	else
		place = redis.call("ZADD", waiters, "XX", "INCR", 0, waiter) or placed(priority, waited, sec, t)
		ahead = redis.call("ZCOUNT", waiters, "-inf", place - 1)
	end
end

-- take sets slot i (1..n) to the token when it is free.
local function take(i)
	return redis.call("SET", KEYS[i], token, "NX", "PX", ttl) and i
end

-- pick takes a slot and returns it (1..n): prefer when free, else the
-- first free one; nil when no more than ahead are free.
local function pick()
	if ahead == 0 then
		local got = prefer >= 0 and prefer < n and take(prefer + 1)
		for i = 1, n do
			got = got or take(i)
		end
		return got or nil
	end
	local free, first = 0, nil
	for i = 1, n do
		if redis.call("EXISTS", KEYS[i]) == 0 then
			free = free + 1
			if not first or i == prefer + 1 then
				first = i
			end
		end
	end
	return free > ahead and take(first) or nil
end

local got = pick()
if got then
	if now and waiter ~= "" then
		redis.call("ZREM", waiters, waiter)
		redis.call("ZREM", due, waiter)
	end
	if epoch ~= "" then
		local epochKey = KEYS[2 * n + 4]
		redis.call("SET", epochKey, epoch, "NX")
		return {got, fenceOf(KEYS[n + 3 + got], epochKey), redis.call("GET", epochKey)}
	end
	return got
end
if waiter ~= "" then
	if not now then
		clock()
	end
	redis.call("ZADD", waiters, place or placed(priority, waited, sec, t), waiter)
	redis.call("ZADD", due, now + life * 1000, waiter)
	redis.call("PEXPIRE", waiters, 2 * life)
	redis.call("PEXPIRE", due, 2 * life)
end
local least = -1
for i = 1, n do
	local p = redis.call("PTTL", KEYS[i])
	if p >= 0 and (least < 0 or p < least) then
		least = p
	end
end
return {0, least}
