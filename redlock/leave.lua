-- Leave: take a waiter out of a key's queue.
-- KEYS[1] the waiters (sorted set); KEYS[2] the waiters' deadlines (hash);
-- KEYS[3] the lock key. ARGV[1] the waiter id.
-- A reservation of the lock key for the waiter is dropped too. Returns 1.
redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("HDEL", KEYS[2], ARGV[1])
if redis.call("GET", KEYS[3]) == "redlock:reserved:" .. ARGV[1] then
	redis.call("DEL", KEYS[3])
end
return 1
