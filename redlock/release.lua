-- Release: delete the lock key only while it holds our token.
-- KEYS[1] the lock key; ARGV[1] the owner token.
-- Returns 1 when the key was ours and is gone, 0 when it was not ours.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0
