-- A waiting call's place in a queue ordered by when the calls began to
-- wait, shared by acquire.lua, sem_acquire.lua and rw_write.lua: this
-- source comes before each one's own.

-- placed returns where a call new on the node goes: prio, when its
-- Client's wall clock says the wait began (µs, the same for every node),
-- unless that clock is more than a second off the node's; then where the
-- node's clock less the time waited places it (µs, a number). waited is
-- how long (µs) the call has waited by its Client's monotonic clock, sec
-- the Client's wall-clock second when it sent the round (prio + waited),
-- t the node's TIME. The clocks read the same second most of the time,
-- and then nothing is computed. wire.Waiter's Misplaced is the same rule
-- for the queue's transaction.
local function placed(prio, waited, sec, t)
	if t[1] == sec then
		return prio
	end
	local began = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(waited)
	if math.abs(tonumber(prio) - began) > 1000000 then
		return began
	end
	return prio
end
