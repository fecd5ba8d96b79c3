-- Release: give up the lock key only while it holds what the caller owns,
-- give it to the longest waiter, and announce it.
-- Unlock and failed rounds give up their token; a waiting Lock that gives
-- up gives up what was handed to it, if anything, and leaves the queue.
-- queue.lua comes first: it names KEYS[1..3] (key, waiters, entries) and
-- ARGV[1..5] (reservedPrefix, handoffPrefix, handoffTail, window, slack).
local owned = ARGV[6] -- the value the caller owns
local queueID = ARGV[7] -- the caller's queue id, "" for none: it leaves the queue even where the key is not its own
local alt = ARGV[8] -- a second value the caller owns, "" for none (the hand-off token of a waiter that won by a round)
local releaseChannel = ARGV[9] -- where a key left free is announced to everyone

-- With a live waiter queued and a window, the key is not deleted but
-- given to the longest waiter (giveToHead, queue.lua). A key left free is
-- announced on releaseChannel with an empty message.
-- Returns 1 when the key held what the caller owns and is given up, 0
-- otherwise; {1, error} when it was given up but the node refused to
-- announce it (PUBLISH denied).
if queueID ~= "" then
	redis.call("ZREM", waiters, queueID)
	redis.call("HDEL", entries, queueID)
end
local v = redis.call("GET", key)
if v ~= owned and (alt == "" or v ~= alt) then
	return 0
end
return giveUp(releaseChannel)
