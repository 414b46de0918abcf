-- Guard limit store: one decision (check, report or unlock) as one atomic
-- script run. The package documentation of internal/limits (store.go) is the
-- specification; redis.go builds the arguments and reads the reply.
--
-- KEYS, in this order (the section sizes are ARGV[3..7]; any may be empty):
--   nR rule logs            ZSET per attempt rule, score = ms, unique members
--   nL lock records         HASH {level, since, until, last, info}
--   nT trust record         0 or 1 key: STRING, the ms the trust ends
--   nF failure logs         ZSET per failure rule
--   nF failure lock records the lock record struck when failure log i fills
--   nC clear keys           logs a success (or an unlock) deletes
--   1  lockout index        ZSET of lock record keys scored by until (ms)
--
-- ARGV:
--   1  op: "check", "report" or "unlock"
--   2  nonce, [A-Za-z0-9_-]{1,32}, unique per call
--   3  nR   4 nL   5 nT   6 nF   7 nC
--   8  cost   9 dry run (0/1)   10 failure (0/1, report only)
--   11 trust TTL ms (0: no trust record is written)   12 decay ms
--   13 nS, the ladder length, then nS ladder steps in ms
--   then per rule:         limit, window ms, shadow (0/1)
--   then per lock:         spare if trusted (0/1)
--   then per failure rule: limit, window ms, info
--
-- Reply for check and report (flat, integers unless noted):
--   now, allowed, locked lock index (1-based into the lock records, 0: none),
--   its level, since, until, info (string),
--   nR, then per rule: allowed, count, remaining, reset ms, retry after ms,
--   nStruck, then per strike: failure rule index, level, since, until.
-- Reply for unlock: now, 1 if any of the lock records was active else 0.
--
-- "now" is Redis TIME in whole milliseconds: one clock for every Guard
-- instance. Redis >= 5 replicates script effects, so TIME is allowed here.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Arguments are read in place (offsets, no copies): this script runs for
-- every decision, and tables cost more than the reads.
local op = ARGV[1]
local nR, nL, nT = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local nF, nC = tonumber(ARGV[6]), tonumber(ARGV[7])
local cost = tonumber(ARGV[8])
local nS = tonumber(ARGV[13])
local aRule = 13 + nS -- rule i: ARGV[aRule+3i-2 .. aRule+3i]
local aLock = aRule + 3 * nR -- lock i: ARGV[aLock+i]
local aFail = aLock + nL -- failure rule i: ARGV[aFail+3i-2 .. aFail+3i]

local kLock = nR
local kTrust = kLock + nL
local kFail = kTrust + nT
local kFailLock = kFail + nF
local kClear = kFailLock + nF
local index = KEYS[kClear + nC + 1]

-- Members are hex(now):nonce:i (or :fi for a failure): 11+1+32+1 bytes
-- plus the digits of i, well under 64, so the logs stay listpack-encoded;
-- the nonce keeps two calls in one millisecond apart.
local stamp = string.format('%x:%s:', now, ARGV[2])

-- A trust record holds its own end in ms: Redis keeps a key alive through
-- the millisecond its TTL ends (and times expiry from the script's start),
-- while trust must end exactly TrustTTL after the success. The record's TTL
-- is a second longer, so it never vanishes before the stored end.
local trusted = nil
local function isTrusted()
  if trusted == nil then
    local v = nT == 1 and tonumber(redis.call('GET', KEYS[kTrust + 1]))
    trusted = v and v > now or false
  end
  return trusted
end

-- activeLock returns the active lock among the lock records that ends last
-- (the first of equals), as index, level, since, until, info; index 0: none.
local function activeLock()
  local bi, bl, bs, bu, binfo = 0, 0, 0, 0, ''
  for i = 1, nL do
    if not (ARGV[aLock + i] == '1' and isTrusted()) then
      local r = redis.call('HMGET', KEYS[kLock + i], 'level', 'since', 'until', 'info')
      local u = tonumber(r[3])
      if u and u > now and (bi == 0 or u > bu) then
        bi, bl, bs, bu, binfo = i, tonumber(r[1]) or 0, tonumber(r[2]) or 0, u, r[4] or ''
      end
    end
  end
  return bi, bl, bs, bu, binfo
end

-- keep makes a log live at least w ms more (a key without a TTL gets one).
-- One log may be used with several windows (a rule key two actions share,
-- or a rule and a failure rule on one key), so an add under the shorter
-- window must not cut the TTL the longer one still needs; the memory store
-- likewise keeps a log for the longest window it was used with.
local function keep(key, w)
  if redis.call('PTTL', key) < w then redis.call('PEXPIRE', key, w) end
end

local struck = {}

-- strike raises failure rule i's lock by one level and restarts it.
local function strike(i)
  local key = KEYS[kFailLock + i]
  local decay = tonumber(ARGV[12])
  local r = redis.call('HMGET', key, 'level', 'last')
  local level = tonumber(r[1]) or 0
  local last = tonumber(r[2])
  if last == nil or now - last >= decay then level = 0 end
  level = math.min(level + 1, nS)
  local untilMs = now + tonumber(ARGV[13 + level])
  redis.call('HSET', key, 'level', level, 'since', now, 'until', untilMs,
    'last', now, 'info', ARGV[aFail + 3 * i])
  -- The record outlives the lockout until the level has decayed.
  redis.call('PEXPIRE', key, math.max(math.max(untilMs, now + decay) - now, 1))
  redis.call('ZADD', index, untilMs, key)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
  local top = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
  if top[2] then
    redis.call('PEXPIRE', index, math.max(tonumber(top[2]) - now, 1))
  end
  struck[#struck + 1] = i
  struck[#struck + 1] = level
  struck[#struck + 1] = now
  struck[#struck + 1] = untilMs
end

-- fail records one failure in every failure log; a log that fills strikes.
local function fail()
  for i = 1, nF do
    local key = KEYS[kFail + i]
    local limit = tonumber(ARGV[aFail + 3 * i - 2])
    local w = tonumber(ARGV[aFail + 3 * i - 1])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
    redis.call('ZADD', key, now, stamp .. 'f' .. i)
    if redis.call('ZCARD', key) >= limit then
      redis.call('DEL', key)
      strike(i)
    else
      keep(key, w)
    end
  end
end

-- finish appends the lock and the strikes to out (which holds now, allowed
-- and the rules) in the reply layout.
local function finish(out, allowed, li, ll, ls, lu, linfo)
  out[2], out[3], out[4], out[5], out[6], out[7] = allowed, li, ll, ls, lu, linfo
  out[#out + 1] = #struck / 4
  for i = 1, #struck do out[#out + 1] = struck[i] end
  return out
end

if op == 'check' then
  local dry = ARGV[9] == '1'
  local li, ll, ls, lu, linfo = activeLock()
  local allowed = li == 0
  local count, oldest = {}, {}
  for i = 1, nR do
    local key = KEYS[i]
    -- Trim only when the oldest entry has left the window; an empty or
    -- current log then costs one or two calls instead of three.
    local edge = now - tonumber(ARGV[aRule + 3 * i - 1])
    local o = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
    if o and o <= edge then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', edge)
      o = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
    end
    local c = 0
    if o then c = redis.call('ZCARD', key) end
    count[i], oldest[i] = c, o
    if c + cost > tonumber(ARGV[aRule + 3 * i - 2]) and ARGV[aRule + 3 * i] ~= '1' then
      allowed = false
    end
  end

  local out = {now, 0, 0, 0, 0, 0, '', nR}
  for i = 1, nR do
    local key, c = KEYS[i], count[i]
    local limit = tonumber(ARGV[aRule + 3 * i - 2])
    local w = tonumber(ARGV[aRule + 3 * i - 1])
    local fits = c + cost <= limit
    -- A rule logs (or, dry, would log) iff the attempt is allowed and the
    -- rule itself admits it; a shadow rule never logs what it would deny.
    local logs = allowed and fits
    local after = c
    if logs then after = c + cost end
    local reset = 0
    if c > 0 then
      reset = oldest[i] + w - now
    elseif logs then
      reset = w
    end
    local retry = 0
    if not fits then
      -- Cost fits once the k oldest entries have left; the k-th leaves at
      -- its stamp + W. A cost above the limit never fits; it is told to
      -- come back when the log is empty (as the memory store does).
      local k = math.min(c + cost - limit, c)
      if k > 0 then
        retry = tonumber(redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2]) + w - now
      else
        retry = w
      end
    end
    local n = #out
    out[n + 1] = fits and 1 or 0
    out[n + 2] = after
    out[n + 3] = math.max(limit - after, 0)
    out[n + 4] = reset
    out[n + 5] = retry
    if logs and not dry then
      if cost == 1 then
        redis.call('ZADD', key, now, stamp .. 1)
      else
        -- ZADD in batches: unpack is bounded by the Lua C stack.
        local j = 1
        while j <= cost do
          local args = {}
          local last = math.min(j + 999, cost)
          for m = j, last do
            args[#args + 1] = now
            args[#args + 1] = stamp .. m
          end
          redis.call('ZADD', key, unpack(args))
          j = last + 1
        end
      end
      keep(key, w)
    end
  end

  if li == 0 and not allowed and not dry then fail() end
  return finish(out, allowed and 1 or 0, li, ll, ls, lu, linfo)
end

if op == 'report' then
  if ARGV[10] == '1' then
    fail()
  else
    for i = 1, nC do redis.call('DEL', KEYS[kClear + i]) end
    local ttl = tonumber(ARGV[11])
    if nT == 1 and ttl > 0 then
      redis.call('SET', KEYS[kTrust + 1], now + ttl, 'PX', ttl + 1000)
      trusted = true
    end
  end
  local li, ll, ls, lu, linfo = activeLock()
  return finish({now, 0, 0, 0, 0, 0, '', 0}, 0, li, ll, ls, lu, linfo)
end

if op == 'unlock' then
  local active = 0
  for i = 1, nL do
    local key = KEYS[kLock + i]
    local u = tonumber(redis.call('HGET', key, 'until'))
    if u and u > now then active = 1 end
    redis.call('DEL', key)
    redis.call('ZREM', index, key)
  end
  for i = 1, nC do redis.call('DEL', KEYS[kClear + i]) end
  return {now, active}
end

return redis.error_reply('guard: unknown op ' .. tostring(op))
