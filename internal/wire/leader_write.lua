-- Leader record: write the record of an election's leader, only while the
-- election key still holds the leader's token, and announce it to every
-- observer. The record has no TTL: it names a token, and it counts only
-- while the election key holds that token (leader_read.lua).
local key = KEYS[1] -- the election key (a fenced mutex)
local record = KEYS[2] -- the leader record (a hash)
local token = ARGV[1] -- the leader's lock token
local value = ARGV[2] -- what the leader says of itself
local term = ARGV[3] -- the leader's term: its lock's fence
local client = ARGV[4] -- the leader's Client ID
local channel = ARGV[5] -- where a new record is announced: the record key's release channel

-- Returns 1 when the record is written, 0 when the election key does not
-- hold the token (the lock is gone or another's); {1, error} when it is
-- written but the node refused to announce it (PUBLISH denied).
if redis.call("GET", key) ~= token then
	return 0
end
redis.call("HSET", record, "token", token, "value", value, "term", term, "client", client)
local r = redis.pcall("PUBLISH", channel, term)
if type(r) == "table" and r.err then
	return {1, r.err}
end
return 1
