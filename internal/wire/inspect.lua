-- Inspect: what a node holds for a lock key, read and nothing written.
local key = KEYS[1] -- the lock key
local waiters = KEYS[2] -- the queue (sorted set of waiter ids)
local fenceKey = KEYS[3] -- the fence counter
local epochKey = KEYS[4] -- the epoch of the key's slot, whose floor fence_read.lua reads

-- Returns {value or false, pttl, queued, fence or false}: the key's value
-- (a token, or a reservation), its PTTL (-2: no key, -1: no TTL), how
-- many Lock calls are queued (a waiter that left without saying so stays
-- until a hand-off finds its entry gone, or the queue runs out), and the
-- largest fence written back for the key (fenceOf: "0" for none).
return {redis.call("GET", key), redis.call("PTTL", key), redis.call("ZCARD", waiters), fenceOf(fenceKey, epochKey)}
