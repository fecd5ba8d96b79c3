-- Semaphore release: give up every slot that holds our token, but the one
-- kept, and announce it to the longest waiting call (to every waiting
-- Client when none is queued here); take the waiting call that took the
-- permit out of the queue. Unlock keeps none; after a round that won a
-- slot on a quorum, the nodes that granted another slot give that one up.
local n = #KEYS - 2 -- KEYS[1..n] are the slots
local waiters = KEYS[n + 1] -- the queue (sem_acquire.lua)
local due = KEYS[n + 2] -- the queue's deadlines
local token = ARGV[1] -- the owner token; "" when only the queue is left
local releaseChannel = ARGV[2] -- where a freed slot is announced: the semaphore's release channel
local keep = tonumber(ARGV[3]) -- the slot (from 0) to keep, -1 for none
local waiter = ARGV[4] -- the waiting call's id, which leaves the queue; "" for none

-- Returns 1 when a slot was ours and is gone, 0 when none was; {1, error}
-- when one is gone but the node refused to announce it (PUBLISH denied).
if waiter ~= "" and redis.call("ZREM", waiters, waiter) == 1 then
	redis.call("ZREM", due, waiter)
end
local freed = 0
for i = 1, n do
	if i - 1 ~= keep and redis.call("GET", KEYS[i]) == token then
		redis.call("DEL", KEYS[i])
		freed = 1
	end
end
if freed == 1 then
	-- The longest waiter is told; the others wait on (it may be a waiter
	-- that left without saying so: the others ask again within their
	-- refresh interval, and their rounds drop it).
	local head = redis.call("ZRANGE", waiters, 0, 0)[1] or ""
	local r = redis.pcall("PUBLISH", releaseChannel, head)
	if type(r) == "table" and r.err then
		return {1, r.err}
	end
end
return freed
