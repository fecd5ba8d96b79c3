-- Election inspection: what a node holds for an election, read and
-- nothing written.
local key = KEYS[1] -- the election key (a fenced mutex)
local waiters = KEYS[2] -- its queue of waiting campaigns (sorted set)
local fenceKey = KEYS[3] -- its fence counter: the last term minted here
local record = KEYS[4] -- the leader record (a hash)
local epochKey = KEYS[5] -- the epoch of its slot, whose floor fence_read.lua reads

-- Returns {token or false, pttl, queued, fence or false}, as inspect.lua
-- does for the election key, then the record's token, value, term and
-- client ID, each false when there is no record.
local r = redis.call("HMGET", record, "token", "value", "term", "client")
return {redis.call("GET", key), redis.call("PTTL", key), redis.call("ZCARD", waiters), fenceOf(fenceKey, epochKey),
	r[1], r[2], r[3], r[4]}
