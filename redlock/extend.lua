-- Extend: give the lock key a new time to live only while it holds our
-- token. A key that expired or belongs to another owner is left alone:
-- an extension never re-creates a lock.
-- KEYS[1] the lock key; ARGV[1] the owner token; ARGV[2] the TTL in ms.
-- Returns 1 when the key was ours and now lives ARGV[2] ms, 0 otherwise.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
