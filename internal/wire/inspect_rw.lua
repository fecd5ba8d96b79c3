-- Read-write lock inspection: what a node holds for a read-write lock,
-- read and nothing written.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local writers = KEYS[3] -- sorted set: waiting writer id by priority
local mutex = KEYS[4] -- the name as a mutex's key
local writersDue = KEYS[5] -- sorted set: waiting writer id by the node time (µs) its place lapses
local marker = ARGV[1] -- what the mutex key holds while the read-write lock is held

-- Returns {writer token or false, its PTTL, the first waiting writer's
-- id or false, the ms its place has left,
-- 1 when a mutex holds the name (0 otherwise), the readers whose hold
-- ended but whose entry is still there, then each live reader's token
-- and the ms its hold has left}.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call("GET", mutex)
-- The first waiting writer whose place has not lapsed.
local due = {}
local live = redis.call("ZRANGEBYSCORE", writersDue, "(" .. now * 1000, "+inf", "WITHSCORES")
for i = 1, #live, 2 do
	due[live[i]] = tonumber(live[i + 1])
end
local head, headLeft = false, -2
for _, id in ipairs(redis.call("ZRANGE", writers, 0, 15)) do
	if due[id] then
		head, headLeft = id, math.floor((due[id] - now * 1000) / 1000)
		break
	end
end
local out = {redis.call("GET", writer), redis.call("PTTL", writer), head,
	headLeft, (m and m ~= marker) and 1 or 0, 0}
local kv = redis.call("HGETALL", readers)
for i = 1, #kv, 2 do
	local left = tonumber(kv[i + 1]) - now
	if left > 0 then
		out[#out + 1] = kv[i]
		out[#out + 1] = left
	else
		out[6] = out[6] + 1
	end
end
return out
