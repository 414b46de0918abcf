-- Guard limit store: manual lockouts (LockRequest in lock.go) as one atomic
-- script run. A manual lock record has the layout of a struck one (HASH
-- {level, since, until, last, info}) with level 0 and no last strike, so
-- checks, listings and unlocks read it like any lock record.
--
-- KEYS: n manual lock records, then n strike lock records (a strike key
-- may be an unused placeholder when the caller named none), then the
-- lockout index (ZSET of lock record keys scored by until ms).
-- ARGV: 1 n, 2 duration ms, then n infos.
--
-- Reply: now, then per lock: level of its strike record (0 when there is
-- none), and the later of the two ends in ms.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local n = tonumber(ARGV[1])
local dur = tonumber(ARGV[2])
local untilMs = now + dur
local index = KEYS[2 * n + 1]

local out = {now}
for i = 1, n do
  local key = KEYS[i]
  redis.call('DEL', key)
  redis.call('HSET', key, 'level', 0, 'since', now, 'until', untilMs, 'last', 0, 'info', ARGV[2 + i])
  redis.call('PEXPIRE', key, dur)
  redis.call('ZADD', index, untilMs, key)
  local r = redis.call('HMGET', KEYS[n + i], 'level', 'until')
  local level = tonumber(r[1]) or 0
  local su = tonumber(r[2])
  local ends = untilMs
  if su and su > ends then ends = su end
  out[#out + 1] = level
  out[#out + 1] = ends
end
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local top = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
if top[2] then
  redis.call('PEXPIRE', index, math.max(tonumber(top[2]) - now, 1))
end
return out
