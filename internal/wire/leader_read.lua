-- Leader read: the election key's token and the leader record, read and
-- nothing written. The caller counts a node for a leader only when the
-- record names the token the election key holds.
local key = KEYS[1] -- the election key
local record = KEYS[2] -- the leader record

-- Returns {token or false, record token, value, term, client ID}, each
-- of the record's fields false when there is no record.
local r = redis.call("HMGET", record, "token", "value", "term", "client")
return {redis.call("GET", key), r[1], r[2], r[3], r[4]}
