-- Leader extension: an election leader's lock extension. As extend.lua,
-- the election key lives ttl ms from now only while it holds the leader's
-- token; and there the leader record is written again when it is missing
-- or names another token (a record that reached only some nodes, or a
-- node that lost it), and announced. A key that does not hold the token
-- is left alone, and so is its record.
local key = KEYS[1] -- the election key (a fenced mutex)
local record = KEYS[2] -- the leader record (a hash)
local token = ARGV[1] -- the leader's lock token
local ttl = ARGV[2] -- the new TTL in ms
local value = ARGV[3] -- what the leader says of itself
local term = ARGV[4] -- the leader's term: its lock's fence
local client = ARGV[5] -- the leader's Client ID
local channel = ARGV[6] -- where a new record is announced: the record key's release channel

-- Returns 1 when the key held the token and now lives ttl ms, 0
-- otherwise. A record written but not announced (PUBLISH denied) still
-- returns 1: observers ask every second anyway.
if redis.call("GET", key) ~= token then
	return 0
end
redis.call("PEXPIRE", key, ttl)
if redis.call("HGET", record, "token") ~= token then
	redis.call("HSET", record, "token", token, "value", value, "term", term, "client", client)
	redis.pcall("PUBLISH", channel, term)
end
return 1
