-- Extend several lock keys at once: all of them or none. A key that
-- expired or belongs to another owner is left alone, and so are the
-- others: an extension never re-creates a lock.
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the new TTL in ms

-- Returns 1 when every key (KEYS) held the token and now lives ttl ms, 0
-- otherwise.
for i = 1, #KEYS do
	if redis.call("GET", KEYS[i]) ~= token then
		return 0
	end
end
for i = 1, #KEYS do
	redis.call("PEXPIRE", KEYS[i], ttl)
end
return 1
