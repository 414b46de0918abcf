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

local op = ARGV[1]
local nonce = ARGV[2]
local nR, nL, nT = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local nF, nC = tonumber(ARGV[6]), tonumber(ARGV[7])
local cost = tonumber(ARGV[8])
local dry = ARGV[9] == '1'
local failure = ARGV[10] == '1'
local trustTTL = tonumber(ARGV[11])
local decay = tonumber(ARGV[12])
local nS = tonumber(ARGV[13])

local ladder = {}
for i = 1, nS do ladder[i] = tonumber(ARGV[13 + i]) end
local a = 13 + nS

local rLimit, rWindow, rShadow = {}, {}, {}
for i = 1, nR do
  rLimit[i] = tonumber(ARGV[a + 1])
  rWindow[i] = tonumber(ARGV[a + 2])
  rShadow[i] = ARGV[a + 3] == '1'
  a = a + 3
end
local lSpare = {}
for i = 1, nL do
  lSpare[i] = ARGV[a + 1] == '1'
  a = a + 1
end
local fLimit, fWindow, fInfo = {}, {}, {}
for i = 1, nF do
  fLimit[i] = tonumber(ARGV[a + 1])
  fWindow[i] = tonumber(ARGV[a + 2])
  fInfo[i] = ARGV[a + 3]
  a = a + 3
end

local kLock = nR
local kTrust = kLock + nL
local kFail = kTrust + nT
local kFailLock = kFail + nF
local kClear = kFailLock + nF
local index = KEYS[kClear + nC + 1]

-- Members are hex(now):nonce:i (or :fi for a failure), at most
-- 11+1+32+1+7 bytes, so the logs stay listpack-encoded; the nonce keeps two
-- calls in one millisecond apart.
local stamp = string.format('%x:%s:', now, nonce)

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
    if not (lSpare[i] and isTrusted()) then
      local r = redis.call('HMGET', KEYS[kLock + i], 'level', 'since', 'until', 'info')
      local u = tonumber(r[3])
      if u and u > now and (bi == 0 or u > bu) then
        bi, bl, bs, bu, binfo = i, tonumber(r[1]) or 0, tonumber(r[2]) or 0, u, r[4] or ''
      end
    end
  end
  return bi, bl, bs, bu, binfo
end

local struck = {}

-- strike raises failure rule i's lock by one level and restarts it.
local function strike(i)
  local key = KEYS[kFailLock + i]
  local r = redis.call('HMGET', key, 'level', 'last')
  local level = tonumber(r[1]) or 0
  local last = tonumber(r[2])
  if last == nil or now - last >= decay then level = 0 end
  level = level + 1
  if level > nS then level = nS end
  local untilMs = now + ladder[level]
  redis.call('HSET', key, 'level', level, 'since', now, 'until', untilMs,
    'last', now, 'info', fInfo[i])
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
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - fWindow[i])
    redis.call('ZADD', key, now, stamp .. 'f' .. i)
    if redis.call('ZCARD', key) >= fLimit[i] then
      redis.call('DEL', key)
      strike(i)
    else
      redis.call('PEXPIRE', key, fWindow[i])
    end
  end
end

-- reply assembles the check/report answer.
local function reply(allowed, li, ll, ls, lu, linfo, rules)
  local out = {now, allowed, li, ll, ls, lu, linfo, nR}
  for i = 1, #rules do out[#out + 1] = rules[i] end
  out[#out + 1] = #struck / 4
  for i = 1, #struck do out[#out + 1] = struck[i] end
  return out
end

if op == 'check' then
  local li, ll, ls, lu, linfo = activeLock()
  local allowed = li == 0
  local count, fits, oldest = {}, {}, {}
  for i = 1, nR do
    local key = KEYS[i]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - rWindow[i])
    count[i] = redis.call('ZCARD', key)
    fits[i] = count[i] + cost <= rLimit[i]
    if not fits[i] and not rShadow[i] then allowed = false end
  end

  local rules = {}
  for i = 1, nR do
    local key, w, c = KEYS[i], rWindow[i], count[i]
    -- A rule logs (or, dry, would log) iff the attempt is allowed and the
    -- rule itself admits it; a shadow rule never logs what it would deny.
    local logs = allowed and fits[i]
    local after = c
    if logs then after = c + cost end
    local reset = 0
    if c > 0 then
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      reset = tonumber(first[2]) + w - now
    elseif logs then
      reset = w
    end
    local retry = 0
    if not fits[i] then
      -- Cost fits once the k oldest entries have left; the k-th leaves at
      -- its stamp + W. A cost above the limit never fits; it is told to
      -- come back when the log is empty (as the memory store does).
      local k = c + cost - rLimit[i]
      if k > c then k = c end
      if k > 0 then
        local e = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
        retry = tonumber(e[2]) + w - now
      else
        retry = w
      end
    end
    local ok = 0
    if fits[i] then ok = 1 end
    rules[#rules + 1] = ok
    rules[#rules + 1] = after
    rules[#rules + 1] = math.max(rLimit[i] - after, 0)
    rules[#rules + 1] = reset
    rules[#rules + 1] = retry
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
      redis.call('PEXPIRE', key, w)
    end
  end

  if li == 0 and not allowed and not dry then fail() end
  local a1 = 0
  if allowed then a1 = 1 end
  return reply(a1, li, ll, ls, lu, linfo, rules)
end

if op == 'report' then
  if failure then
    fail()
  else
    for i = 1, nC do redis.call('DEL', KEYS[kClear + i]) end
    if nT == 1 and trustTTL > 0 then
      redis.call('SET', KEYS[kTrust + 1], now + trustTTL, 'PX', trustTTL + 1000)
      trusted = true
    end
  end
  local li, ll, ls, lu, linfo = activeLock()
  return reply(0, li, ll, ls, lu, linfo, {})
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
