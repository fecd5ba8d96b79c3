-- giveUp, shared by release.lua and force_release.lua (this source comes
-- after queue.lua's in each): gives the lock key up as a release does, to
-- the longest waiter when window (ms, "0" for none) allows (giveToHead),
-- or deleted and announced on the key's release channel with an empty
-- message. It returns the reply of a release that gave the key up: 1, or
-- {1, error} when the node refused to announce it (PUBLISH denied).
local function giveUp(window)
	local v, err
	if window ~= "0" then
		v, err = giveToHead(window, nil)
	end
	if not v then
		redis.call("DEL", key)
		local p = redis.pcall("PUBLISH", releasedPrefix .. key, "")
		if type(p) == "table" then
			err = p.err
		end
	end
	if err then
		return {1, err}
	end
	return 1
end
