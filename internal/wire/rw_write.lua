-- Read-write lock, a writer: take the lock while no writer holds it, no
-- live reader is in, and no other writer's intent is there. A writer that
-- waits (intentMs above 0) leaves its intent when refused, so that new
-- readers wait behind it and a stream of readers cannot starve it.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local intent = KEYS[3] -- a waiting writer's token
local mutex = KEYS[4] -- the name as a mutex's key: a name is one kind of lock
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the TTL in ms
local intentMs = tonumber(ARGV[3]) -- how long a refused waiting writer's intent lasts; 0 for none
local waiter = ARGV[4] -- the waiting writer's id, which its intent holds; "" for none
local marker = ARGV[5] -- what the mutex key holds while the read-write lock is held

-- Returns 1 when taken; {0, pttl} when refused, pttl the ms until the
-- holders (the writer, or the last live reader) or the other writer's
-- intent run out; {4} when a mutex holds the name.
local m = redis.call("GET", mutex)
if m and m ~= marker then
	return {4}
end
local function refuse(pttl)
	local mine = redis.call("GET", intent)
	if intentMs > 0 and (not mine or mine == waiter) then
		redis.call("SET", intent, waiter, "PX", intentMs)
	end
	return {0, pttl}
end
local p = redis.call("PTTL", writer)
if p ~= -2 then
	return refuse(p)
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kv = redis.call("HGETALL", readers)
local last = -1
for i = 1, #kv, 2 do
	local left = tonumber(kv[i + 1]) - now
	if left <= 0 then
		redis.call("HDEL", readers, kv[i])
	else
		last = math.max(last, left)
	end
end
if last > 0 then
	return refuse(last)
end
local other = redis.call("GET", intent)
if other and other ~= waiter then
	return {0, redis.call("PTTL", intent)}
end
redis.call("SET", writer, token, "PX", ttl)
-- The marker refuses a mutex on the name while anyone holds it.
if not m or redis.call("PTTL", mutex) < tonumber(ttl) then
	redis.call("SET", mutex, marker, "PX", ttl)
end
if other then
	redis.call("DEL", intent)
end
return 1
