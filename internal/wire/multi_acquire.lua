-- Acquire several lock keys at once: all of them or none.
local n = tonumber(ARGV[3]) -- how many lock keys: KEYS[1..n]; with fencing KEYS[n+1..2n] are their fence counters, KEYS[2n+1..3n] the epochs of their slots
local token = ARGV[1] -- the owner token
local ttl = ARGV[2] -- the TTL in ms
local epoch = ARGV[4] -- with fencing: a random epoch, stored only where a slot has none yet; "" without fencing

-- A key that holds anything (another owner's token, a hand-off to a
-- waiting Lock call, a reservation) is held: the script then changes
-- nothing and returns {0, pttl}, pttl the longest time one of the held
-- keys has left (-1: one has no TTL). Otherwise every key takes the token
-- for ttl, and it returns 1, or with fencing {1, counter1, epoch1, ...,
-- countern, epochn}.
local longest, held = -2, false
for i = 1, n do
	if redis.call("GET", KEYS[i]) then
		held = true
		local left = redis.call("PTTL", KEYS[i])
		if left == -1 or longest == -1 then
			longest = -1
		elseif left > longest then
			longest = left
		end
	end
end
if held then
	return {0, longest}
end
for i = 1, n do
	redis.call("SET", KEYS[i], token, "PX", ttl)
end
if epoch == "" then
	return 1
end
local out = {1}
for i = 1, n do
	redis.call("SET", KEYS[2 * n + i], epoch, "NX")
	out[#out + 1] = fenceOf(KEYS[n + i], KEYS[2 * n + i])
	out[#out + 1] = redis.call("GET", KEYS[2 * n + i])
end
return out
