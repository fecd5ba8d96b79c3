-- Read-write lock, a reader: join the readers while no writer holds the
-- lock and none waits for it (writer preference: a waiting writer leaves
-- its intent, and new readers wait behind it).
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local intent = KEYS[3] -- a waiting writer's token
local mutex = KEYS[4] -- the name as a mutex's key: a name is one kind of lock
local token = ARGV[1] -- the owner token
local ttl = tonumber(ARGV[2]) -- the TTL in ms

-- Returns 1 when the reader joined; {0, pttl} when a writer holds the
-- lock or waits for it, pttl its ms left; {4} when a mutex holds the name.
if redis.call("EXISTS", mutex) == 1 then
	return {4}
end
for _, k in ipairs({writer, intent}) do
	local p = redis.call("PTTL", k)
	if p ~= -2 then
		return {0, p}
	end
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", readers, token, now + ttl)
if redis.call("PTTL", readers) < ttl then
	redis.call("PEXPIRE", readers, ttl)
end
return 1
