-- Extend: give the lock key a new time to live only while it holds our
-- token. A key that expired or belongs to another owner is left alone:
-- an extension never re-creates a lock.
local key = KEYS[1] -- the lock key
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the new TTL in ms
local also = ARGV[3] -- for a lock that a round of a waiting call won, what a hand-off after that round sets ("<hand-off token>/h<round>"), ours too; nil otherwise

-- Returns 1 when the key was ours and now lives ttl ms, 0 otherwise.
local v = redis.call("GET", key)
if v == token or also and v == also then
	return redis.call("PEXPIRE", key, ttl)
end
return 0
