-- Read-write lock, a release: give up the writer's key or the reader's
-- entry that holds our token, and announce it to every waiting Client;
-- a waiting writer that gives up takes its intent away.
local writer = KEYS[1] -- the writer's token
local readers = KEYS[2] -- hash: reader token -> the node time (ms) its hold ends
local intent = KEYS[3] -- a waiting writer's id
local mutex = KEYS[4] -- the name as a mutex's key, which holds the marker
local token = ARGV[1] -- the owner token
local releaseChannel = ARGV[2] -- where a release is announced: the name's release channel
local marker = ARGV[3] -- what the mutex key holds while the read-write lock is held
local waiter = ARGV[4] -- a waiting writer's id whose intent goes; "" for none

-- Returns 1 when the token held something here and it is given up, 0
-- otherwise; {1, error} when given up but the node refused to announce
-- it (PUBLISH denied).
local freed = 0
if waiter ~= "" and redis.call("GET", intent) == waiter then
	redis.call("DEL", intent)
	freed = 1
elseif redis.call("GET", writer) == token then
	redis.call("DEL", writer)
	freed = 1
elseif redis.call("HDEL", readers, token) == 1 then
	freed = 1
end
if freed == 0 then
	return 0
end
-- The last holder out takes the marker away: the name is free for any kind.
if redis.call("EXISTS", writer, readers) == 0 and redis.call("GET", mutex) == marker then
	redis.call("DEL", mutex)
end
local r = redis.pcall("PUBLISH", releaseChannel, "")
if type(r) == "table" and r.err then
	return {1, r.err}
end
return 1
