-- Read-write lock, a release: give up the writer's key or the reader's
-- entry that holds our token, and announce it to every waiting Client.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local token = ARGV[1] -- the owner token
local releaseChannel = ARGV[2] -- where a release is announced: the name's release channel

-- Returns 1 when the token held something here and it is given up, 0
-- otherwise; {1, error} when given up but the node refused to announce
-- it (PUBLISH denied).
local freed = 0
if redis.call("GET", writer) == token then
	redis.call("DEL", writer)
	freed = 1
elseif redis.call("HDEL", readers, token) == 1 then
	freed = 1
end
if freed == 0 then
	return 0
end
local r = redis.pcall("PUBLISH", releaseChannel, "")
if type(r) == "table" and r.err then
	return {1, r.err}
end
return 1
