-- ForceRelease: give up the lock key whatever it holds, as a release
-- would: to the longest waiter, or free and announced.
-- queue.lua and give_up.lua come first: they name KEYS[1..2] (key, queue).
local window = ARGV[1] -- the reservation window in ms, "0" for none (then the key goes to no waiter)

-- Returns 1 when the key held something and was given up, 0 when it was
-- free; {1, error} when it was given up but the node refused to announce
-- it (PUBLISH denied).
if not redis.call("GET", key) then
	return 0
end
return giveUp(window)
