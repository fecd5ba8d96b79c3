-- Release several lock keys: delete each key (KEYS) that holds our token
-- and announce it free, as the short release does for one key, so that
-- waiting Lock calls wake (the first whose round finds a key free gives
-- it to the longest waiter of its queue, acquire.lua).
local token = ARGV[1] -- the owner token
local releasedPrefix = ARGV[2] -- a key left free is announced on releasedPrefix .. key

-- Returns 1 when every key held the token and is gone, 0 when some did
-- not (those that did are gone all the same); {1, error} when they are
-- gone but the node refused to announce it (PUBLISH denied).
local all, refused = true, nil
for i = 1, #KEYS do
	if redis.call("GET", KEYS[i]) == token then
		redis.call("DEL", KEYS[i])
		local r = redis.pcall("PUBLISH", releasedPrefix .. KEYS[i], "")
		if type(r) == "table" and r.err then
			refused = r.err
		end
	else
		all = false
	end
end
if not all then
	return 0
end
if refused then
	return {1, refused}
end
return 1
