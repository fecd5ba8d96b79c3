-- fenceOf returns the largest fence written back for a lock key, as a
-- string ("0" for none): its counter's, or its slot's floor's when that
-- is larger. The counter expires some time after the key's last fenced
-- lock; the floor (the epoch key's name and ":fence") keeps the largest
-- fence of any key of the slot, for good.
local function fenceOf(counter, epochKey)
	local c = redis.call("GET", counter) or "0"
	local f = redis.call("GET", epochKey .. ":fence") or "0"
	if (tonumber(f) or 0) > (tonumber(c) or 0) then
		return f
	end
	return c
end

