-- Read-write lock, a reader: join the readers while no writer holds the
-- lock and none waits for it (writer preference: a waiting writer leaves
-- its intent, and new readers wait behind it).
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local intent = KEYS[3] -- a waiting writer's token
local mutex = KEYS[4] -- the name as a mutex's key: a name is one kind of lock
local token = ARGV[1] -- the owner token
local ttl = tonumber(ARGV[2]) -- the TTL in ms
local marker = ARGV[3] -- what the mutex key holds while the read-write lock is held

-- Returns 1 when the reader joined; {0, pttl} when a writer holds the
-- lock or waits for it, pttl its ms left; {4} when a mutex holds the name.
local m = redis.call("GET", mutex)
if m and m ~= marker then
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
-- The marker refuses a mutex on the name while anyone holds it.
if not m or redis.call("PTTL", mutex) < ttl then
	redis.call("SET", mutex, marker, "PX", ttl)
end
return 1
