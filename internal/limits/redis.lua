-- Guard limit store, data model v2: one decision (or its share on one Redis
-- Cluster slot) as one atomic call of a Redis function. This file is the
-- body of a function library that redis_func.go names guard_<version>
-- (FUNCTION LOAD), registering run() below as its one function of the same
-- name: the helpers are defined once, when the library loads, not on every
-- call as an EVAL script's would be. internal/limits/store.go is the
-- specification; redis_call.go builds the arguments and reads the reply, and
-- computes remaining, reset and retry-after from what this function returns.
--
-- Arguments are streams read in order (KEYS by key(), the spec by
-- arg()/num(), the varying fields by dyn(); see below), so each section
-- names its fields instead of offsets; a check's rules, fixed in size, are
-- read by index. Every number of the spec is hexadecimal (see num()) but a
-- check rule's and a failure rule's keep, which are decimal: the function
-- passes them on as SET's PX unconverted (a Lua number would be formatted
-- by printf there).
--
-- The last argument of every call is its deadline ('~' and hexadecimal ms
-- on Redis's clock, '~0' for none; redis_late.go): a call begun after it
-- answers the error LATE <now> and does nothing.
--
-- ARGV[1], the spec: op ("check", "report", "unlock", "rollback", "undo"
-- or "release"), then per op (in [brackets] the fields that are not in the
-- spec but the next of ARGV[2..], in this order):
--   check:    nR nL nT nO denyFail(0/1) spares (bit j-1 set: lock j is
--             spared when the device is trusted) pairs (bit j-1 set: lock
--             j has the level of lock j-1 too, its key's struck record;
--             the higher is answered) ats (0/1: reply each
--             rule's at, which only a Cluster rollback reads) [cost
--             (hexadecimal),
--             flags ('' when none is set, else '0'/'1' each: dry run, then
--             per log rule and per other rule: its challenge was
--             passed)], per rule: limit window keep (decimal) flags (1
--             shadow + 2 challenge), the escalation when denyFail, per
--             other rule: kind limit window keep flags [member], then
--             reserve(0/1), and when 1: ttl, escalation
--   report:   nL nT failure(0/1) trustTTL nC, escalation, spares and
--             pairs (as a check's), then nRec (0/1)
--   release:  nF
--   unlock:   nL nC
--   rollback: nK cost at
--   undo:     kind cost at limit window [member] (one other rule's share;
--             cost in decimal: a bucket's may be a fraction)
--   escalation: nF decay nS, nS ladder steps, then per failure rule:
--             limit window keep (decimal) nX nP (0/1: a distinct rule's
--             pending set follows) [info member ('' for a log)]
-- KEYS, in the order the sections name them:
--   check:    nR rule logs, nL lock records, nT (0/1) trust record, nO
--             other rules' keys (these four: the one MGET), escalation
--             keys; when reserve: record, escalation keys
--   report:   nL lock records, nT trust record, nC clear keys, escalation
--             keys, nRec reservation records
--   release:  record, nF failure logs
--   unlock:   nL lock records, nC clear keys
--   rollback: nK logs
--   undo:     the rule's key
--   escalation keys, per failure rule: when nP its pending set, its log,
--             its lock record, then nX lockout index keys
--
-- Data:
--   log          STRING of 6-byte big-endian ms stamps, ascending; trimmed to
--                (now-keep, now] on every write; PX keep (keep >= every
--                window that uses the key, fixed by the caller at start-up)
--   lock record  STRING "level|since|until|last|info"; PX until the level
--                has decayed (max(until, last+decay) - now)
--   trust record STRING: the ms the trust ends; PX one second longer
--   index        ZSET of lock record keys scored by until: the locks that
--                involve one identity (never a key every decision shares)
--   Other rule kinds (internal/limits/kinds.go), kind 'c', 'b' or 'd':
--   counter      STRING '>I6I4I4': sub-window start (ms), current count,
--                previous count (each saturated at 2^32-1); PX keep,
--                which the caller sends as 2W for a counter (kindKeep)
--   bucket       STRING '>dI6': tokens at the last spend (a double), its ms;
--                PX keep (full by then; a missing bucket is full)
--   distinct set STRING of 14-byte records: 6-byte ms last seen, 8-byte
--                value; ascending by stamp; trimmed and PX as a log
--   pending set  STRING of 22-byte records: 6-byte ms, 8-byte value,
--                2-byte count of the reservations holding it, 6-byte
--                token of the record (K.failDistinct); a distinct
--                failure rule's provisional values, counted with its set;
--                ascending by stamp; trimmed and PX as a log
--   record       STRING, a reservation (reserve_failures): "p" then per
--                failure log "\n<key>\n<stamp>" (0: struck) and per
--                pending set "\n<key>\nv<value in hex>@<token in hex>"
--                (0: struck), or "s" once settled; PX the longest failure
--                window
--
-- Replies:
--   check:   now allowed (+2 when the trust record names a trusted
--            device; read on a denial, or with ats) lockIdx, when lockIdx > 0 level since until
--            info, nR, {count oldest kth} per rule, when ats {at} per
--            rule,
--            nO {a b c d at} per other rule,
--            nStruck {failIdx level since until}
--            count is the rule's entries in its window before this attempt,
--            oldest the oldest of them (0: none), kth the stamp of the entry
--            whose leaving lets cost fit (0: fits, or never fits), at the
--            stamp this call logged (0: none). Other rules, before the
--            attempt: counter a b c = start cur prev (rolled to now), at =
--            start when counted; bucket a = last spend, d = its tokens
--            ('%.17g'), at = 1 when spent; distinct a = values in the
--            window, b = 1 if the attempt's is one, c = oldest stamp, d =
--            oldest stamp of the other values, at = the stamp of a value
--            this call added (0: none, or only refreshed)
--   report:  now 0 lockIdx (level since until info when lockIdx > 0)
--            0 nStruck {...}
--   unlock:  now anyActive
--   rollback, release: now
--   A check's nStruck strikes are of the reservation's escalation when it
--   was allowed, of the denial escalation when not.
--
-- "now" is Redis TIME in whole milliseconds: one clock for every Guard
-- instance on one Redis. Functions replicate their effects, so TIME is
-- allowed here.

-- Standard functions as upvalues, cheaper than a global lookup at each
-- use; set by the first call (a library being loaded sees no globals).
local floor, min, max, fmod, ssub, srep, sbyte, spack, sunpack, tonumber, tunpack, next

-- The library's state: the call's KEYS, ARGV and clock, and what the call
-- has read and done so far, all reset by run() at the start of every
-- call. The functions below are defined once, when the library loads.
local KEYS, ARGV, now

-- A call's arguments are two streams. ARGV[1] is the call's spec: its op
-- and the fields that are the same in every call of one policy and request
-- shape (counts, limits, windows, keeps, flags), as tokens separated by
-- spaces, numbers in hexadecimal. A check's or report's spec is parsed once
-- and kept (specs, below), so such a call converts no number and its
-- Redis builds two strings where it would build one per field (every
-- argument costs Redis a Lua string and a table slot, docs/performance.md).
-- ARGV[2..] are the fields that vary from call to call (a check's cost and
-- flags, a failure rule's lock info, a distinct rule's value), in the
-- order the sections read them: read by dyn().
local SP, ST, SN -- the parsed spec; its tokens, and each as a hexadecimal number (or false)
local FL -- a check's flags: '' (none set) or '0'/'1' per flag (see flag())
local ai, di, ki = 0, 1, 0
local function arg() ai = ai + 1 return ST[ai] end
local function num() ai = ai + 1 return SN[ai] end
local function dyn() di = di + 1 return ARGV[di] end
local function key() ki = ki + 1 return KEYS[ki] end
-- flag reports a check's flag i: 1 dry run, 1+i log rule i passed its
-- challenge, 1+nR+j other rule j did.
local function flag(i) return FL ~= '' and sbyte(FL, i) == 49 end

-- specs caches parsed specs by their string: a check's or a report's, of
-- which a policy has a few dozen (the other ops are rare, and rollback's
-- and undo's specs hold stamps: parsed per call). A Lua string is
-- interned, so a lookup hashes nothing. Bounded: past maxSpecs the cache
-- starts again.
local specs, nSpecs, maxSpecs = {}, 0, 512
local function spec(s)
  local p = specs[s]
  if p then return p end
  local t, n, i = {}, {}, 0
  for tok in string.gmatch(s, '%S+') do
    i = i + 1
    t[i] = tok
    n[i] = tonumber(tok, 16) or false
  end
  p = {t, n}
  if t[1] == 'check' or t[1] == 'report' then
    if nSpecs >= maxSpecs then specs, nSpecs = {}, 0 end
    specs[s] = p
    nSpecs = nSpecs + 1
  end
  return p
end

local W = 6 -- bytes per stamp
local function stamp(s, i) return (sunpack('>I6', s, (i - 1) * W + 1)) end

-- first returns the 1-based index of the first stamp > edge in s (n+1 if
-- none), by binary search: stamps are ascending. Records are w bytes
-- (default W, a log's bare stamps), each starting with its stamp.
local function first(s, n, edge, w)
  w = w or W
  local lo, hi = 1, n + 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if sunpack('>I6', s, (mid - 1) * w + 1) > edge then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- tohex is s in (lowercase) hexadecimal, unhex its inverse (reservation
-- records keep a pending set's values and tokens so: they may hold any
-- byte). Both are one string.gsub with a table of the 256 bytes, built
-- once: a function per byte (a closure, a string.format and their
-- garbage) cost a reserving check 61k of the 150k instructions a distinct
-- failure rule added to it (docs/performance.md).
local HEX, UNHEX
local function hexTables()
  HEX, UNHEX = {}, {}
  for b = 0, 255 do
    local c, h = string.char(b), string.format('%02x', b)
    HEX[c], UNHEX[h] = h, c
  end
end
local function tohex(s)
  if not HEX then hexTables() end
  return (string.gsub(s, '.', HEX))
end
local function unhex(h)
  if not HEX then hexTables() end
  return (string.gsub(h, '%x%x', UNHEX))
end

-- raw caches the keys read in this call outside a check's one MGET:
-- key -> value (false: absent). Reads of other keys (a strike's lock
-- record) are a GET each.
local raw = {}
local function read(k)
  local v = raw[k]
  if v == nil then
    v = redis.call('GET', k)
    raw[k] = v
  end
  return v
end

local function badLog(k) error('guard: ' .. k .. ' is no log of 6-byte stamps') end

-- logs caches each failure log as this call sees it: key -> string ('' when
-- absent).
local logs = {}

-- append writes s trimmed to (now-keep, now] plus c stamps of now and
-- returns the stamp. A stamp is never below the last one (Redis TIME may
-- step back), so logs stay sorted; that only ever counts an entry longer.
-- most, when given, keeps only the newest most stamps (passed challenges:
-- 1000 or limit + cost, kinds.go PassedKeep).
-- cache: keep the written log in logs.
local nowStamp -- spack('>I6', now), made by the call's first append
local function append(k, s, c, keep, most, cache)
  local at, out = now, nil
  if s == '' then
    if not nowStamp then nowStamp = spack('>I6', now) end
    out = nowStamp
    if c > 1 then out = srep(out, c) end
  else
    local n = #s / W
    local from = first(s, n, now - keep)
    if n > 0 then at = max(now, stamp(s, n)) end
    out = ssub(s, (from - 1) * W + 1) .. srep(spack('>I6', at), c)
  end
  if most and #out > most * W then out = ssub(out, #out - most * W + 1) end
  if cache then logs[k] = out end
  redis.call('SET', k, out, 'PX', keep)
  return at
end

-- Lock records: "level|since|until|last|info".
local function parseLock(v)
  if not v then return nil end
  local level, since, untilMs, last, info = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not level then return nil end
  return {tonumber(level), tonumber(since), tonumber(untilMs), tonumber(last), info}
end

-- isTrusted reports whether the call's trust record, whose value tv the
-- call's MGET read, trusts the device (false without a trust record).
local trustKey, trusted
local function isTrusted(tv)
  if trusted == nil then
    local x = trustKey and tonumber(tv)
    trusted = x ~= nil and x > now
  end
  return trusted
end

-- hasBit reports whether bit j-1 of mask is set: in a spares mask, lock j
-- spares a trusted device; in a pairs mask, lock j shares lock j-1's level.
local function hasBit(mask, j) return floor(mask / 2 ^ (j - 1)) % 2 == 1 end

-- lockLevel is the level to answer for lock li (record lr): its own or,
-- when bit li-1 of pairs says it shares its key's level with lock li-1
-- (value prev: a manual lockout after its key's struck record), the higher
-- of the two, since a strike during a manual lockout raises the level.
local function lockLevel(li, lr, pairs, prev)
  local lvl = lr[1]
  if li > 1 and hasBit(pairs, li) then
    local p = parseLock(prev)
    if p and p[1] > lvl then lvl = p[1] end
  end
  return lvl
end

-- later returns lock j (value lv) and its record when it is active and
-- ends after the lock li (record lr) found so far, else li and lr: the
-- active lock that ends last, first of equals.
local function later(li, lr, j, lv)
  local r = parseLock(lv)
  if r and r[3] > now and (li == 0 or r[3] > lr[3]) then return j, r end
  return li, lr
end

local esc, struck = nil, {}

-- A check's or report's reply is built in OUT[1..on] (see finish()); OUT,
-- FIT and AT (a check's per-rule fits and stamps) serve every call, so a
-- call allocates none of them and they grow once.
local OUT, on, FIT, AT = {}, 0, {}, {}
local function put(x) on = on + 1 OUT[on] = x end
-- reply starts OUT: now, allowed, lockIdx, then when lockIdx > 0 the
-- lock li's (record lr's) level, since, until and info, then nR.
local function reply(nR, li, lr, lvl)
  OUT[1], OUT[2], OUT[3] = now, 0, li
  on = 3
  if lr then
    OUT[4], OUT[5], OUT[6], OUT[7] = lvl or lr[1], lr[2], lr[3], lr[5]
    on = 7
  end
  on = on + 1
  OUT[on] = nR
end

-- The failure machinery (escalation, strikes, reservations, reports) is
-- built on first use by slow(), like the rule kinds by kinds(): a library
-- that only ever checks defines none of it.
local S = nil
local kinds
local function slow()
  if S then return S end
  S = {}

  local function prefetch(keys)
    local want = {}
    for _, k in ipairs(keys) do
      if raw[k] == nil then want[#want + 1] = k; raw[k] = false end
    end
    if #want > 0 then
      local v = redis.call('MGET', tunpack(want))
      for i, k in ipairs(want) do raw[k] = v[i] end
    end
  end

  local function readLock(k) return parseLock(read(k)) end

  local function readLog(k)
    local s = logs[k]
    if s == nil then
      s = read(k) or ''
      if #s % W ~= 0 then badLog(k) end
      logs[k] = s
    end
    return s
  end

  -- readEscalation reads an escalation section into esc. Its spec
  -- fields and the positions of its keys are the same in every call of
  -- one spec, so its tables are built by the first such call and kept
  -- with the parsed spec (SP.esc, by the section's position in the spec);
  -- every call fills in only what varies: each failure rule's log and
  -- lock keys, info and value. A failure rule's lockout index keys stay
  -- in KEYS, KEYS[x+1..x+nX], read by strike().
  local function readEscalation()
    local cache = SP.esc
    if not cache then
      cache = {}
      SP.esc = cache
    end
    local e = cache[ai]
    if e then
      ai, ki = e.ai, e.ki
      local fails = e.fails
      for i = 1, #fails do
        local f = fails[i]
        f.info, f.member = dyn(), dyn() or ''
        f.key, f.lock = KEYS[f.x - 1], KEYS[f.x]
        if f.np then f.pend = KEYS[f.x - 2] end
      end
      esc = e
      return
    end
    local at = ai
    local nF, decay, nS = num(), num(), num()
    local ladder = {}
    for i = 1, nS do ladder[i] = num() end
    local fails = {}
    for i = 1, nF do
      -- keep in decimal: append() and setSee() pass it on as PX.
      local limit, window, keep, nX, np = num(), num(), arg(), num(), num() == 1
      local info, member = dyn(), dyn() or ''
      local pend = np and key() or nil
      local k, lock = key(), key()
      fails[i] = {limit = limit, window = window, keep = keep, info = info, member = member,
        key = k, lock = lock, x = ki, nX = nX, np = np, pend = pend}
      ki = ki + nX
    end
    esc = {fails = fails, decay = decay, ladder = ladder, ai = ai, ki = ki}
    cache[at] = esc
  end

  -- strike raises failure rule i's lock by one level and restarts it. A
  -- strike at or past its ladder's top (on a ledger whose actions have
  -- ladders of different lengths, through the shorter one) never lowers
  -- the level nor ends a running lockout earlier (as MemoryStore.strike).
  local function strike(i, f)
    local r = readLock(f.lock)
    local level, last, running = 0, nil, 0
    if r then level, last, running = r[1], r[4], r[3] end
    if last == nil or now - last >= esc.decay then level, running = 0, 0 end
    local capped = level >= #esc.ladder
    level = max(min(level + 1, #esc.ladder), level)
    local untilMs = now + esc.ladder[min(level, #esc.ladder)]
    if capped and running > untilMs then untilMs = running end
    local rec = level .. '|' .. now .. '|' .. untilMs .. '|' .. now .. '|' .. f.info
    redis.call('SET', f.lock, rec, 'PX', max(max(untilMs, now + esc.decay) - now, 1))
    raw[f.lock] = rec
    for j = 1, f.nX do
      local x = KEYS[f.x + j]
      redis.call('ZREMRANGEBYSCORE', x, '-inf', now)
      redis.call('ZADD', x, untilMs, f.lock)
      if redis.call('PTTL', x) < untilMs - now then redis.call('PEXPIRE', x, untilMs - now) end
    end
    struck[#struck + 1] = i
    struck[#struck + 1] = level
    struck[#struck + 1] = now
    struck[#struck + 1] = untilMs
  end

  -- fail records one failure in every failure rule but those in skip (a
  -- reservation's, which hold it already: its logs and pending sets); a
  -- log or set that fills strikes. rec, when given (a reservation),
  -- collects key, stamp per log (stamp 0: it struck) and key, hold per
  -- pending set (K.failDistinct), where a distinct rule then holds its
  -- value, tok being the reservation record's key; a distinct rule
  -- without a pending set takes the value as a reported failure
  -- (refreshing it counts nothing twice).
  local function fail(rec, skip, tok)
    for i, f in ipairs(esc.fails) do
      if f.member ~= '' then
        if not (skip and f.pend and skip[f.pend]) then
          local held = kinds().failDistinct(i, f, rec ~= nil, tok)
          if rec and f.pend then
            rec[#rec + 1] = f.pend
            rec[#rec + 1] = held
          end
        end
      elseif not (skip and skip[f.key]) then
        local s = readLog(f.key)
        local n = #s / W
        local c = n - first(s, n, now - f.window) + 1
        local at = 0
        if c + 1 >= f.limit then
          logs[f.key] = ''
          redis.call('DEL', f.key)
          strike(i, f)
        else
          at = append(f.key, s, 1, f.keep, nil, true)
        end
        if rec then
          rec[#rec + 1] = f.key
          rec[#rec + 1] = at
        end
      end
    end
  end

  -- unlog takes back one stamp at from log k, if it is still there.
  local function unlog(k, at)
    local s = readLog(k)
    local n = #s / W
    for j = n, 1, -1 do
      local v = stamp(s, j)
      if v == at then
        s = ssub(s, 1, (j - 1) * W) .. ssub(s, j * W + 1)
        logs[k] = s
        if s == '' then redis.call('DEL', k) else redis.call('SET', k, s, 'KEEPTTL') end
        return
      elseif v < at then
        return
      end
    end
  end

  -- readRecord returns a reservation record as nil (none), 's' (settled)
  -- or a table key -> what it holds there, as recorded (pending): a log's
  -- stamp, a pending set's 'v', the value in hex, '@' and the token of
  -- the record the hold went to in hex, '0' when it struck.
  local function readRecord(k)
    local v = redis.call('GET', k)
    if not v then return nil end
    if v == 's' then return 's' end
    local held, key = {}, nil
    for part in string.gmatch(v, '\n([^\n]*)') do
      if key then held[key] = part; key = nil else key = part end
    end
    return held
  end

  -- unhold takes back what a reservation record holds in key k (h, as
  -- readRecord returns it): a log's entry or a pending set's holder.
  local function unhold(k, h)
    if not h then return end
    if sbyte(h, 1) == 118 then -- 'v'
      local m, tok = string.match(h, '^v(%x+)@(%x+)$')
      if m then kinds().unpend(k, unhex(m), unhex(tok)) end
    else
      local at = tonumber(h)
      if at and at > 0 then unlog(k, at) end
    end
  end

  S.prefetch = prefetch
  S.readEscalation, S.strike, S.fail, S.readRecord, S.unhold = readEscalation, strike, fail, readRecord, unhold
  return S
end

-- Rules of other kinds (kinds.go): counters ('c'), buckets ('b') and
-- distinct sets ('d', also as failure rules). others holds a check's other
-- rules. Their functions are defined on first use by kinds(): a decision
-- of logs only then pays for one closure instead of a dozen (defining a
-- function costs every call, see docs/performance.md).
local others = {}
local K = nil
function kinds()
  if K then return K end
  K = {}
  -- Distinct sets (kinds.go): STRINGs of DW-byte records, a 6-byte stamp
  -- and an 8-byte value, ascending by stamp.
  local DW = 14
  local function dstamp(s, i) return (sunpack('>I6', s, (i - 1) * DW + 1)) end
  local function dfirst(s, n, edge) return first(s, n, edge, DW) end
  -- dfind returns the index of the record holding value m among records
  -- from.., or 0: a plain find, kept only where it is a record's value.
  local function dfind(s, from, m)
    local p = (from - 1) * DW + 1
    while true do
      local j = string.find(s, m, p, true)
      if not j then return 0 end
      if (j - 1) % DW == 6 then return (j - 7) / DW + 1 end
      p = j + 1
    end
  end
  local function readSet(k)
    local s = read(k) or ''
    if #s % DW ~= 0 then error('guard: ' .. k .. ' is no set of 14-byte records') end
    return s
  end
  -- setSee writes set s (key k) trimmed to (now-keep, now] with value m
  -- seen now (moved to the end, so stamps stay ascending even when TIME
  -- steps back); it returns the stamp. most, when given, keeps only the
  -- newest most records (passed challenges: the newest 1000 or limit + 1,
  -- kinds.go distinctMost and PassedKeep).
  local function setSee(k, s, m, keep, most)
    local n = #s / DW
    local from = dfirst(s, n, now - keep)
    local at = now
    if n > 0 then at = max(now, dstamp(s, n)) end
    local idx = dfind(s, from, m)
    local out
    if idx > 0 then
      out = ssub(s, (from - 1) * DW + 1, (idx - 1) * DW) .. ssub(s, idx * DW + 1)
    else
      out = ssub(s, (from - 1) * DW + 1)
    end
    out = out .. spack('>I6', at) .. m
    if most and #out > most * DW then out = ssub(out, #out - most * DW + 1) end
    raw[k] = out
    redis.call('SET', k, out, 'PX', keep)
    return at
  end

  -- Pending sets (FailureRule.Pending): STRINGs of PW-byte records, a
  -- 6-byte stamp (the newest hold's), an 8-byte value, a 2-byte count of
  -- the reservations holding it and a 6-byte token naming the record:
  -- the first 6 bytes of the SHA-1 of the reservation record key of the
  -- check whose hold made it (after the value was absent, struck, unlocked
  -- or out of the window), ascending by stamp. A reservation records the
  -- token with its value, so a success takes back a hold of the record it
  -- added to only, never one of a record that a check made after a
  -- strike, an unlock or the window had dropped the success's own.
  local PW = 22
  local function readPend(k)
    local p = read(k) or ''
    if #p % PW ~= 0 then error('guard: ' .. k .. ' is no pending set of 22-byte records') end
    return p
  end
  -- pfind returns the index of the record of p (n records) holding value
  -- m, or 0.
  local function pfind(p, n, m)
    for j = 1, n do
      if ssub(p, (j - 1) * PW + 7, (j - 1) * PW + 14) == m then return j end
    end
    return 0
  end
  local function pwrite(k, p)
    raw[k] = p
    if p == '' then redis.call('DEL', k) else redis.call('SET', k, p, 'KEEPTTL') end
  end

  -- K.failDistinct records one failure in distinct failure set f: its value
  -- is added or refreshed (reserve: one more holder of it in f's pending
  -- set), and the set reaching the limit, its pending values counted with
  -- it, strikes and empties both. It returns what a reservation record
  -- keeps of a reserve: 'v', the value in hex, '@' and the token in hex,
  -- or 0 when it struck. tok is the call's reservation record key.
  -- (A stamp would not tell two records apart that one millisecond made.)
  function K.failDistinct(i, f, reserve, tok)
    local s = readSet(f.key)
    local n = #s / DW
    local from = dfirst(s, n, now - f.window)
    local c = n - from + 1
    local present = dfind(s, from, f.member) > 0
    local p, pn, pfrom = '', 0, 1
    if f.pend then
      p = readPend(f.pend)
      pn = #p / PW
      pfrom = first(p, pn, now - f.window, PW)
      for j = pfrom, pn do
        local m = ssub(p, (j - 1) * PW + 7, (j - 1) * PW + 14)
        if dfind(s, from, m) == 0 then
          c = c + 1
          present = present or m == f.member
        end
      end
    end
    if not present then c = c + 1 end
    if c >= f.limit then
      raw[f.key] = false
      redis.call('DEL', f.key)
      if f.pend then
        raw[f.pend] = false
        redis.call('DEL', f.pend)
      end
      slow().strike(i, f)
      return 0
    end
    if not (reserve and f.pend) then
      setSee(f.key, s, f.member, f.keep)
      return 0
    end
    -- One more holder of the value, its record moved to the end with the
    -- newest stamp (as setSee), the set trimmed to (now-keep, now].
    local keep = tonumber(f.keep)
    local at, held, rtok = now, 0, nil
    if pn > 0 then at = max(now, sunpack('>I6', p, (pn - 1) * PW + 1)) end
    local kfrom = first(p, pn, now - keep, PW)
    local out = {}
    for j = kfrom, pn do
      local r = ssub(p, (j - 1) * PW + 1, j * PW)
      if ssub(r, 7, 14) == f.member then
        if j >= pfrom then held, rtok = sunpack('>I2', r, 15), ssub(r, 17, 22) end
      else
        out[#out + 1] = r
      end
    end
    if held == 0 then rtok = unhex(ssub(redis.sha1hex(tok), 1, 12)) end
    out[#out + 1] = spack('>I6', at) .. f.member .. spack('>I2', min(held + 1, 65535)) .. rtok
    p = table.concat(out)
    raw[f.pend] = p
    redis.call('SET', f.pend, p, 'PX', f.keep)
    return 'v' .. tohex(f.member) .. '@' .. tohex(rtok)
  end

  -- K.unpend takes one holder of value m from pending set k, if the
  -- record that the hold went to (token tok) is still there: a strike, an
  -- unlock or the window may have dropped it, and a record of m made
  -- since holds other checks only. Its stamp stays.
  function K.unpend(k, m, tok)
    local p = readPend(k)
    local n = #p / PW
    local j = pfind(p, n, m)
    if j == 0 or ssub(p, (j - 1) * PW + 17, j * PW) ~= tok then return end
    local held = sunpack('>I2', p, (j - 1) * PW + 15)
    if held > 1 then
      p = ssub(p, 1, (j - 1) * PW + 14) .. spack('>I2', held - 1) .. ssub(p, (j - 1) * PW + 17)
    else
      p = ssub(p, 1, (j - 1) * PW) .. ssub(p, j * PW + 1)
    end
    pwrite(k, p)
  end

  -- K.read reads n other rules, their keys KEYS[base+1..base+n]; other
  -- rule i's passed flag is the call's flag pb+i.
  function K.read(n, base, pb)
    for i = 1, n do
      local o = {key = KEYS[base + i], kind = '', limit = 0, window = 0, keep = 0, shadow = false, challenge = false,
        passed = false, member = '', fits = false, a = 0, b = 0, c = 0, d = 0, at = 0, s = false}
      o.kind = arg()
      local fl
      o.limit, o.window, o.keep, fl = num(), num(), num(), num()
      o.shadow, o.challenge, o.passed = fl % 2 == 1, floor(fl / 2) % 2 == 1, flag(pb + i)
      o.member = dyn()
      others[i] = o
    end
  end

  local function bucketLevel(tok, last, limit, w)
    local el = now - last
    if last == 0 or el >= w then return limit end
    if el <= 0 then return min(limit, tok) end
    return min(limit, tok + (el * limit) / w)
  end

  -- K.eval decides every other rule without writing; it reports false
  -- when an enforced one denies, and then whether one that does not
  -- challenge does (hard). The estimates repeat kinds.go's operations in
  -- the same order, so both compute the same doubles. A passed challenge
  -- fits whatever the state.
  function K.eval(cost)
    local ok, hard = true, false
    for _, o in ipairs(others) do
      local v = read(o.key)
      if o.kind == 'c' then
        local w = o.window
        local k = now - fmod(now, w)
        local start, cur, prev = k, 0, 0
        if v then start, cur, prev = sunpack('>I6I4I4', v) end
        if k > start then
          if k == start + w then prev = cur else prev = 0 end
          cur, start = 0, k
        end
        local e = max(now - start, 0)
        local est = cur + prev * (w - e) / w
        o.fits = est + cost <= o.limit or o.passed
        o.a, o.b, o.c = start, cur, prev
      elseif o.kind == 'b' then
        local tok, last = o.limit, 0
        if v then tok, last = sunpack('>dI6', v) end
        o.s = bucketLevel(tok, last, o.limit, o.window)
        o.fits = o.s >= cost or o.passed
        o.a, o.d = last, string.format('%.17g', tok)
      else
        local s = readSet(o.key)
        local n = #s / DW
        local from = dfirst(s, n, now - o.window)
        local c = n - from + 1
        local idx = dfind(s, from, o.member)
        local oldest, other = 0, 0
        if c > 0 then oldest = dstamp(s, from) end
        other = oldest
        if idx == from then
          other = 0
          if c > 1 then other = dstamp(s, from + 1) end
        end
        o.fits = idx > 0 or c < o.limit or o.passed
        o.a, o.c, o.d, o.s = c, oldest, other, s
        if idx > 0 then o.b = 1 end
      end
      if not o.fits and not o.shadow then
        ok = false
        hard = hard or not o.challenge
      end
    end
    return ok, hard
  end

  -- K.record counts the allowed attempt in every other rule it fits.
  function K.record(cost)
    for _, o in ipairs(others) do
      if o.fits then
        if o.kind == 'c' then
          -- Saturated at 4 bytes (kinds.go counterAdd): passed
          -- challenges may add beyond the limit, and a count that wrapped
          -- around would admit again.
          redis.call('SET', o.key, spack('>I6I4I4', o.a, min(o.b + cost, 4294967295), o.c), 'PX', o.keep)
          o.at = o.a
        elseif o.kind == 'b' then
          -- Never below 0 tokens (kinds.go bucketSpend).
          redis.call('SET', o.key, spack('>dI6', max(o.s - cost, 0), now), 'PX', o.keep)
          o.at = 1
        else
          local at = setSee(o.key, o.s, o.member, o.keep, o.passed and max(o.limit + 1, 1000) or nil)
          if o.b == 0 then o.at = at end
        end
      end
    end
  end

  function K.reply()
    put(#others)
    for _, o in ipairs(others) do
      put(o.a)
      put(o.b)
      put(o.c)
      put(o.d)
      put(o.at)
    end
  end
  K.dfind, K.dstamp, K.DW = dfind, dstamp, DW
  return K
end

-- finish returns a check's or report's reply, OUT[1..on], with the
-- strikes put in. OUT serves as the
-- reply of every call: Redis reads a reply array up to its first nil, so
-- what a longer reply left beyond on is cut off by one nil.
local function finish()
  put(#struck / 4)
  for i = 1, #struck do put(struck[i]) end
  OUT[on + 1] = nil
  return OUT
end

-- run is one call of the library's one function (redis.go registers it as
-- guard_<version>): FCALL guard_<version> numkeys KEYS... ARGV...
local function run(keys, args)
  KEYS, ARGV = keys, args
  if not floor then
    floor, min, max, fmod = math.floor, math.min, math.max, math.fmod
    ssub, srep, sbyte, spack, sunpack = string.sub, string.rep, string.byte, struct.pack, struct.unpack
    tonumber, tunpack, next = _G.tonumber, unpack, _G.next
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  -- A call begun after its caller's deadline (the last argument: '~' and
  -- the ms on this clock in hexadecimal, '~0' for none) is refused before
  -- it reads or writes anything: its caller was answered without Redis
  -- (redis_late.go, "Late calls").
  local dl = ARGV[#ARGV]
  if dl and sbyte(dl, 1) == 126 then
    dl = tonumber(ssub(dl, 2), 16)
    if dl and dl > 0 and now > dl then return redis.error_reply('LATE ' .. now) end
  end
  local p = spec(ARGV[1])
  SP, ST, SN, FL = p, p[1], p[2], nil
  ai, di, ki = 0, 1, 0
  -- The tables of the last call serve again, emptied in place: a table
  -- keeps its size, where a new one would grow again (a common check
  -- fills none of them).
  for k in next, raw do raw[k] = nil end
  for k in next, logs do logs[k] = nil end
  for i = #struck, 1, -1 do struck[i] = nil end
  for i = #others, 1, -1 do others[i] = nil end
  trustKey, trusted, esc, nowStamp = nil, nil, nil, nil

  local op = arg()

  if op == 'check' then
    -- The header by index: ST[1] is the op.
    local nR, nL, nT, nO, denyFail, spares, pairs, ats = SN[2], SN[3], SN[4], SN[5], ST[6] == '1', SN[7], SN[8], ST[9] == '1'
    ai = 9
    local cost = tonumber(ARGV[2], 16)
    FL = ARGV[3]
    di = 3
    local flags = FL ~= '' -- a flag is set (else flag(i) is false for all i)
    local dry = flags and flag(1)
    -- Log rule i's limit, window, keep and flags (1 shadow + 2 challenge)
    -- are the spec's tokens rb+4i-3..rb+4i.
    local rb = ai
    ai = ai + 4 * nR
    -- KEYS: rules, locks, trust, others (read by one MGET), then the
    -- escalation's and the reservation's keys.
    local nPre = nR + nL + nT + nO
    ki = nPre
    if denyFail then slow().readEscalation() end
    if nO > 0 then kinds().read(nO, nR + nL + nT, 1 + nR) end
    local escDeny, escRes, rk, rttl = esc, nil, nil, 0
    if arg() == '1' then
      rttl = num()
      rk = key()
      slow().readEscalation()
      escRes = esc
      esc = escDeny
    end

    local v = {}
    if nPre > 0 then v = redis.call('MGET', tunpack(KEYS, 1, nPre)) end
    if nT == 1 then trustKey = KEYS[nR + nL + 1] end
    for i = nR + nL + nT + 1, nPre do raw[KEYS[i]] = v[i] end
    if escRes then
      local pre = {}
      for _, f in ipairs(escRes.fails) do
        pre[#pre + 1] = f.key
        pre[#pre + 1] = f.lock
        if f.pend then pre[#pre + 1] = f.pend end
      end
      slow().prefetch(pre)
    end

    -- The active lock that ends last (first of equals); a spare one counts
    -- unless the device is trusted.
    local li, lr = 0, nil
    for j = 1, nL do
      local lv = v[nR + j]
      if lv and not (hasBit(spares, j) and isTrusted(v[nR + nL + 1])) then li, lr = later(li, lr, j, lv) end
    end
    local allowed = li == 0
    -- hard: an enforced rule that does not challenge denies.
    local hard = false
    reply(nR, li, lr, lr and lockLevel(li, lr, pairs, v[nR + li - 1]))
    local fit, at = FIT, AT
    for i = 1, nR do
      local b = rb + 4 * (i - 1)
      local limit, window, fl = SN[b + 1], SN[b + 2], SN[b + 4]
      local s = v[i] or ''
      if #s % W ~= 0 then badLog(KEYS[i]) end
      local n = #s / W
      local from = first(s, n, now - window)
      local c = n - from + 1
      local oldest, kth = 0, 0
      if c > 0 then oldest = stamp(s, from) end
      local passed = flags and flag(1 + i)
      local fits = c + cost <= limit or passed
      fit[i] = fits
      if not fits then
        local k = min(c + cost - limit, c)
        if k > 0 then kth = stamp(s, from + k - 1) end
        if fl % 2 == 0 then
          allowed = false
          hard = hard or floor(fl / 2) % 2 == 0
        end
      end
      OUT[on + 1], OUT[on + 2], OUT[on + 3] = c, oldest, kth
      on = on + 3
      at[i] = 0
    end
    if nO > 0 then
      local ok, h = kinds().eval(cost)
      if not ok then allowed, hard = false, hard or h end
    end
    if allowed and not dry then
      for i = 1, nR do
        -- A log that several rules name receives the attempt once.
        local once = fit[i]
        for j = 1, i - 1 do
          if once and fit[j] and KEYS[j] == KEYS[i] then once = false end
        end
        if once then
          local b = rb + 4 * (i - 1)
          local most = nil
          if flags and flag(1 + i) then most = max(SN[b + 1] + cost, 1000) end
          -- Cached for a reservation, whose failure logs the store allows
          -- to be a rule's log too: its fail() must see this entry.
          at[i] = append(KEYS[i], v[i] or '', cost, ST[b + 3], most, escRes ~= nil)
        end
      end
      if nO > 0 then kinds().record(cost) end
    end
    if ats then
      for i = 1, nR do OUT[on + i] = at[i] end
      on = on + nR
    end
    if nO > 0 then kinds().reply() else put(0) end
    -- bit 1: allowed; bit 2: the trust record names a trusted device.
    -- Only a denial's strike reads it (CheckResult.Trusted): read on a
    -- denial, and on Cluster whenever the decision spans slots (ats: a
    -- strike may be another slot's follow-up); an allowed check of one
    -- slot, the common one, skips it.
    local a = allowed and 1 or 0
    if nT == 1 and (ats or not allowed) and isTrusted(v[nR + nL + 1]) then a = a + 2 end
    OUT[2] = a
    -- A denial only by challenge rules is a challenge: no failure.
    if li == 0 and not allowed and not dry and denyFail and hard then slow().fail() end
    if allowed and not dry and escRes and #escRes.fails > 0 then
      esc = escRes
      local rec = {'p'}
      slow().fail(rec, nil, rk)
      redis.call('SET', rk, table.concat(rec, '\n'), 'PX', rttl)
    end
    return finish()
  end

  if op == 'report' then
    local nL = num()
    local nT, failure, ttl, nC = num(), arg() == '1', num(), num()
    -- Lock j is KEYS[lb+j], spared for a trusted device when
    -- hasBit(spares, j); the clear keys are KEYS[cb+1..cb+nC].
    local lb = ki
    ki = ki + nL
    if nT == 1 then trustKey = key() end
    local cb = ki
    ki = ki + nC
    local X = slow()
    X.readEscalation()
    local spares, pairs = num(), num()
    local rk = nil
    if num() == 1 then rk = key() end
    -- One MGET: the locks and the trust record (side by side in KEYS) and,
    -- for a failure, each failure rule's log and lock record.
    local n = nL + nT
    local v = {}
    if failure and #esc.fails > 0 then
      local pre = {tunpack(KEYS, lb + 1, lb + n)}
      for _, f in ipairs(esc.fails) do
        pre[#pre + 1] = f.key
        pre[#pre + 1] = f.lock
        if f.pend then pre[#pre + 1] = f.pend end
      end
      v = redis.call('MGET', tunpack(pre))
      for i = n + 1, #pre do raw[pre[i]] = v[i] end
    elseif n > 0 then
      v = redis.call('MGET', tunpack(KEYS, lb + 1, lb + n))
    end
    -- A reservation record settles once: pending (a table) keeps or takes
    -- back its entries, settled ('s') makes this report change nothing.
    local held = rk and X.readRecord(rk)
    if held == 's' then
      -- settled before
    elseif failure then
      X.fail(nil, held)
    else
      if held then
        for _, f in ipairs(esc.fails) do
          if f.pend then X.unhold(f.pend, held[f.pend]) elseif f.member == '' then X.unhold(f.key, held[f.key]) end
        end
      end
      if nC > 0 then redis.call('DEL', tunpack(KEYS, cb + 1, cb + nC)) end -- one command for them all
      if trustKey and ttl > 0 then
        redis.call('SET', trustKey, now + ttl, 'PX', ttl + 1000)
        trusted = true
      end
    end
    if held and held ~= 's' then redis.call('SET', rk, 's', 'KEEPTTL') end
    -- The active lock that ends last (first of equals), after this
    -- report's strikes (raw holds a struck record's new value).
    local li, lr = 0, nil
    for j = 1, nL do
      local lv = raw[KEYS[lb + j]]
      if lv == nil then lv = v[j] end
      if lv and not (hasBit(spares, j) and isTrusted(v[nL + 1])) then li, lr = later(li, lr, j, lv) end
    end
    local lvl = nil
    if lr and li > 1 then
      local pv = raw[KEYS[lb + li - 1]]
      if pv == nil then pv = v[li - 1] end
      lvl = lockLevel(li, lr, pairs, pv)
    end
    -- A strike during a manual lockout of its key: the key is locked
    -- until the later of the two ends, which the strike answers (the
    -- manual record follows its key's struck record, bit j+1 of pairs).
    if #struck > 0 and pairs > 0 then
      for s = 1, #struck, 4 do
        local lock = esc.fails[struck[s]].lock
        for j = 1, nL - 1 do
          if KEYS[lb + j] == lock and hasBit(pairs, j + 1) then
            local m = parseLock(v[j + 1])
            if m and m[3] > struck[s + 3] then struck[s + 3] = m[3] end
            break
          end
        end
      end
    end
    reply(0, li, lr, lvl)
    return finish()
  end

  if op == 'unlock' then
    local nL = num()
    local nC = num()
    local active = 0
    for i = 1, nL do
      local k = key()
      local r = parseLock(redis.call('GET', k))
      if r and r[3] > now then active = 1 end
      redis.call('DEL', k)
    end
    for i = 1, nC do redis.call('DEL', key()) end
    return {now, active}
  end

  if op == 'rollback' then
    -- Takes back cost stamps of value at from each log: the share of a
    -- Cluster decision that another slot denied. Stamps of one value are
    -- interchangeable, so any cost of them will do.
    local nK, cost, at = num(), num(), num()
    local p = spack('>I6', at)
    for i = 1, nK do
      local k = key()
      local s = redis.call('GET', k)
      if s then
        local n = #s / W
        local left = cost
        local j = n
        while j >= 1 and left > 0 do
          local v = stamp(s, j)
          if v == at then
            s = ssub(s, 1, (j - 1) * W) .. ssub(s, j * W + 1)
            left = left - 1
          elseif v < at then
            break
          end
          j = j - 1
        end
        if #s == 0 then
          redis.call('DEL', k)
        else
          redis.call('SET', k, s, 'KEEPTTL')
        end
      end
    end
    return {now}
  end

  if op == 'undo' then
    -- Takes back what one counter, bucket or distinct rule recorded for a
    -- Cluster decision that another slot denied (see the reply's at).
    local kind, cost, at, limit, w, m = arg(), tonumber(arg()), num(), num(), num(), dyn()
    local k = key()
    local v = redis.call('GET', k)
    if not v then return {now} end
    if kind == 'c' then
      local start, cur, prev = sunpack('>I6I4I4', v)
      if start == at then
        cur = max(cur - cost, 0)
      elseif start == at + w then
        prev = max(prev - cost, 0)
      else
        return {now}
      end
      redis.call('SET', k, spack('>I6I4I4', start, cur, prev), 'KEEPTTL')
    elseif kind == 'b' then
      local tok, last = sunpack('>dI6', v)
      redis.call('SET', k, spack('>dI6', min(limit, tok + cost), last), 'KEEPTTL')
    else
      local kd = kinds()
      local idx = kd.dfind(v, 1, m)
      if idx > 0 and kd.dstamp(v, idx) == at then
        v = ssub(v, 1, (idx - 1) * kd.DW) .. ssub(v, idx * kd.DW + 1)
        if #v == 0 then redis.call('DEL', k) else redis.call('SET', k, v, 'KEEPTTL') end
      end
    end
    return {now}
  end

  if op == 'release' then
    -- Takes back a reservation of a Cluster decision that another slot
    -- denied: its provisional entries leave their logs, the record goes
    -- (a strike it made stays: stricter, never looser).
    local nF = num()
    local rk = key()
    local X = slow()
    local held = X.readRecord(rk)
    for i = 1, nF do
      local k = key()
      if type(held) == 'table' then X.unhold(k, held[k]) end
    end
    redis.call('DEL', rk)
    return {now}
  end

  return redis.error_reply('guard: unknown op ' .. tostring(op))
end
