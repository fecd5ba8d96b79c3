-- Release, the short way: delete the lock key only while it holds our
-- token, and announce to every waiting Client that it is free. Used by a
-- holder that did not wait for the lock, while its Client waits for no
-- one on the key: there is most likely no queue. If there is one, the
-- waiters wake, and the first whose round finds the key free keeps it
-- for the longest of them (acquire.lua), so the order still holds.
local key = KEYS[1] -- the lock key
local token = ARGV[1] -- the owner token
local releaseChannel = ARGV[2] .. key -- where the key, once free, is announced to everyone: releasedPrefix .. key

-- Returns 1 when the key was ours and is gone, 0 when it was not ours;
-- {1, error} when it is gone but the node refused to announce it
-- (PUBLISH denied): the release happened all the same.
if redis.call("GET", key) ~= token then
	return 0
end
redis.call("DEL", key)
local r = redis.pcall("PUBLISH", releaseChannel, "")
if type(r) == "table" and r.err then
	return {1, r.err}
end
return 1
