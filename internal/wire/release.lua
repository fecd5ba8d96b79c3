-- Release: give up the lock key only while it holds what the caller owns,
-- give it to the longest waiter, and announce it.
-- Unlock and failed rounds give up their token; a waiting Lock that gives
-- up gives up what was handed to it, if anything, and leaves the queue.
-- queue.lua and give_up.lua come first: they name KEYS[1..2] (key, queue).
local owned = ARGV[1] -- the value the caller owns
local queueID = ARGV[2] -- the caller's queue id, "" for none: it leaves the queue even where the key is not its own
local alt = ARGV[3] -- what starts the values the caller also owns, "" for none: "<hand-off token>/", its rounds' tokens and the hand-offs that followed them
local window = ARGV[4] -- the reservation window in ms, "0" for none (then the key goes to no waiter)

-- With a live waiter queued and a window, the key is not deleted but
-- given to the longest waiter (giveToHead, queue.lua). A key left free is
-- announced on its release channel with an empty message.
-- Returns 1 when the key held what the caller owns and is given up, 0
-- otherwise; {1, error} when it was given up but the node refused to
-- announce it (PUBLISH denied).
if queueID ~= "" then
	-- Its entry is left to run out: out of the queue, it is handed
	-- nothing.
	redis.call("ZREM", queue, queueID)
end
local v = redis.call("GET", key)
if not v or v ~= owned and (alt == "" or string.find(v, alt, 1, true) ~= 1) then
	return 0
end
return giveUp(window)
