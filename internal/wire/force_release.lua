-- ForceRelease: give up the lock key whatever it holds, as a release
-- would: to the longest waiter, or free and announced.
-- queue.lua comes first: it names KEYS[1..3] (key, waiters, entries) and
-- ARGV[1..5] (reservedPrefix, handoffPrefix, handoffTail, window, slack).
local releaseChannel = ARGV[6] -- where a key left free is announced to everyone

-- Returns 1 when the key held something and was given up, 0 when it was
-- free; {1, error} when it was given up but the node refused to announce
-- it (PUBLISH denied).
if not redis.call("GET", key) then
	return 0
end
return giveUp(releaseChannel)
