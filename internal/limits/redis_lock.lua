-- Guard limit store: manual lockouts (LockRequest in lock.go), data model
-- v2, as one atomic script run per Redis Cluster slot (on one Redis, one
-- run). A manual lock record has the layout of a struck one (STRING
-- "level|since|until|last|info") with level 0 and no last strike, so checks,
-- listings and unlocks read it like any lock record. Lockout index entries
-- are written by redis_lock.go, as for strikes on Cluster.
--
-- KEYS: per lock: its manual lock record, then its strike lock record (a
-- key that never exists when the caller named none); both in one slot.
-- ARGV: n, duration ms, then n infos, then the call's deadline ('~' and
-- hexadecimal ms on Redis's clock, '~0' for none; redis_late.go): begun
-- after it, the script answers the error LATE <now> and does nothing.
--
-- Reply: now, then per lock: the level of its strike record (0 when there
-- is none) and the later of the two ends in ms.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local dl = ARGV[#ARGV]
if dl and string.byte(dl, 1) == 126 then
  dl = tonumber(string.sub(dl, 2), 16)
  if dl and dl > 0 and now > dl then return redis.error_reply('LATE ' .. now) end
end

local n = tonumber(ARGV[1])
local dur = tonumber(ARGV[2])
local untilMs = now + dur

local out = {now}
for i = 1, n do
  local key, strike = KEYS[2 * i - 1], KEYS[2 * i]
  redis.call('SET', key, '0|' .. now .. '|' .. untilMs .. '|0|' .. ARGV[2 + i], 'PX', dur)
  local level, ends = 0, untilMs
  local r = redis.call('GET', strike)
  if r then
    local l, _, u = string.match(r, '^(%d+)|(%d+)|(%d+)|')
    if l then
      level = tonumber(l)
      if tonumber(u) > now and tonumber(u) > ends then ends = tonumber(u) end
    end
  end
  out[#out + 1] = level
  out[#out + 1] = ends
end
return out
