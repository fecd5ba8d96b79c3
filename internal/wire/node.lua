-- The restart check: which process the node runs, how long it has run,
-- and the marker a Client left on it once the node could be counted.
local marker = KEYS[1] -- the marker key
local mark = ARGV[1] -- a run id, or "": when it is the node's run id, the node is marked with it first

-- Returns {run id, uptime_in_seconds as INFO says, marker}; the marker is left
-- out when the node has none.
local info = redis.call("INFO", "server")
local id = string.match(info, "run_id:(%x+)")
local up = tonumber(string.match(info, "uptime_in_seconds:(%d+)"))
if id == nil or up == nil then
	return redis.error_reply("redlock: INFO server has no run_id or uptime_in_seconds")
end
if mark ~= "" and mark == id then
	redis.call("SET", marker, id)
end
return {id, up, redis.call("GET", marker)}
