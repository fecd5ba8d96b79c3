-- Release: give up the lock key only while it holds what the caller owns,
-- give it to the longest waiter, and announce it.
-- Unlock and failed rounds give up their token; a waiting Lock that gives
-- up gives up what was handed to it, if anything, and leaves the queue.
-- queue.lua and give_up.lua come first: they name KEYS[1..2] (key, queue).
local owned = ARGV[1] -- the value the caller owns
local queueID = ARGV[2] -- the caller's queue id, "" for none: it leaves the queue even where the key is not its own
local alt = ARGV[3] -- a second value the caller owns, "" for none (the hand-off token of a waiter that won by a round)
local window = ARGV[4] -- the reservation window in ms, "0" for none (then the key goes to no waiter)

-- With a live waiter queued and a window, the key is not deleted but
-- given to the longest waiter (giveToHead, queue.lua). A key left free is
-- announced on its release channel with an empty message.
-- Returns 1 when the key held what the caller owns and is given up, 0
-- otherwise; {1, error} when it was given up but the node refused to
-- announce it (PUBLISH denied).
if queueID ~= "" then
	-- A waiter handed the key (its entry starts with "h") is no longer
	-- in the queue.
	local e = redis.call("GETDEL", queue .. ":" .. queueID)
	if not e or string.byte(e) ~= 104 then
		redis.call("ZREM", queue, queueID)
	end
end
local v = redis.call("GET", key)
if v ~= owned and (alt == "" or v ~= alt) then
	return 0
end
return giveUp(window)
