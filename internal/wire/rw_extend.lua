-- Read-write lock, an extension: the writer's key, or a live reader's
-- entry, lives ttl ms from now. A reader whose hold ran out is not
-- brought back: its entry may already have let a writer in.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local mutex = KEYS[4] -- the name as a mutex's key, which holds the marker (KEYS[3], KEYS[5..8]: the queues, unused here)
local token = ARGV[1] -- the owner token
local ttl = tonumber(ARGV[2]) -- the new TTL in ms
local marker = ARGV[3] -- what the mutex key holds while the read-write lock is held

-- mark keeps the marker for ttl ms at least, so that a mutex on the name
-- is refused while the hold lasts.
local function mark()
	local m = redis.call("GET", mutex)
	if not m or (m == marker and redis.call("PTTL", mutex) < ttl) then
		redis.call("SET", mutex, marker, "PX", ttl)
	end
end

-- Returns 1 when extended, 0 when the token holds nothing here.
if redis.call("GET", writer) == token then
	redis.call("PEXPIRE", writer, ttl)
	mark()
	return 1
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = tonumber(redis.call("HGET", readers, token))
if not ends or ends <= now then
	return 0
end
redis.call("HSET", readers, token, now + ttl)
if redis.call("PTTL", readers) < ttl then
	redis.call("PEXPIRE", readers, ttl)
end
mark()
return 1
