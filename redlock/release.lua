-- Release: give up the lock key only while it holds what the caller owns,
-- give it to the longest waiter, and announce it.
-- Unlock and failed rounds give up their token; a waiting Lock that gives
-- up gives up what was handed to it, if anything, and leaves the queue.
-- KEYS[1] the lock key; KEYS[2] the waiters (sorted set by priority);
-- KEYS[3] the waiters' entries (see queue.lua).
-- ARGV[1] the value the caller owns; ARGV[2] the reservation window in
-- ms, 0 for none; ARGV[3] the caller's queue id, "" for none: it leaves
-- the queue even on a node where the key is not its own; ARGV[4] a second
-- value the caller owns, "" for none (the hand-off token of a waiter that
-- won by a round); ARGV[5] how long (ms) a waiter's entry outlives a
-- hand-off at most.
-- With a live waiter queued and a window, the key is not deleted but
-- given to the longest waiter (giveToHead, queue.lua). A key left free is
-- announced to everyone on "redlock:released:<key>" with an empty
-- message.
-- Returns 1 when the key held what the caller owns and is given up, 0
-- otherwise; {1, error} when it was given up but the node refused to
-- announce it (PUBLISH denied).
if ARGV[3] ~= "" then
	redis.call("ZREM", KEYS[2], ARGV[3])
	redis.call("HDEL", KEYS[3], ARGV[3])
end
local v = redis.call("GET", KEYS[1])
if v ~= ARGV[1] and (ARGV[4] == "" or v ~= ARGV[4]) then
	return 0
end
if not (tonumber(ARGV[2]) > 0 and giveToHead(nil, tonumber(ARGV[5]), ARGV[2])) then
	redis.call("DEL", KEYS[1])
	announce("redlock:released:" .. KEYS[1], "")
end
if refused then
	return {1, refused}
end
return 1
