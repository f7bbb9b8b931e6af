package sluiceredis

import "github.com/redis/go-redis/v9"

// The scripts run on Redis's clock: each reads TIME once and decides every
// request it carries at that instant. Times are microseconds since the Unix
// epoch held in Lua numbers (doubles, exact below 2^53 µs, year 2255).
// Fractions are stored and returned as strings formatted with %.17g, which
// round-trip a double exactly, and whole numbers below 2^53 with %d; Lua
// numbers returned as Redis integers would be truncated.
//
// A sliding-window log member is "<seq>:<count>": seq makes it unique, count
// is the number of permits the grant carried.

// luaLimitClock opens the take and give scripts: replication of effects (needed
// before Redis 5 for a script that writes after TIME; a no-op later), the
// clock, and number formatting. The helpers are split by algorithm
// (luaBucket, luaWindow) because every helper is a closure each invocation
// creates: the lone-request script carries only what it uses.
const luaLimitClock = `
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- fmt writes x exactly: an integer (a time in µs, a whole token count) with
-- %d, anything else with %.17g, which costs Redis's Lua about three times
-- as much (glibc's exact conversion) and ran up to three times per request.
local function fmt(x)
  if x == math.floor(x) and x > -9007199254740992 and x < 9007199254740992 then
    return string.format('%d', x)
  end
  return string.format('%.17g', x)
end

-- ms turns a span in µs into a PEXPIRE argument: whole ms, rounded up, >= 1.
local function ms(us)
  local m = math.ceil(us / 1000)
  if m < 1 then m = 1 end
  return m
end

`

// luaBucket reads and writes a token bucket: a hash of its level (t) and the
// time of that level (ts), in µs.
const luaBucket = `
-- bucket_level is the token bucket's level now: the stored level plus the
-- refill since it was stored, capped at burst; a missing bucket is full.
local function bucket_level(key, rate, burst)
  local st = redis.call('HMGET', key, 't', 'ts')
  local tokens, ts = tonumber(st[1]), tonumber(st[2])
  if tokens == nil or ts == nil then return burst end
  if now > ts then tokens = tokens + (now - ts) * rate end
  if tokens > burst then tokens = burst end
  return tokens
end

local function bucket_store(key, tokens, rate, burst, ivl)
  redis.call('HSET', key, 't', fmt(tokens), 'ts', fmt(now))
  -- The key lives until the bucket would be full again, plus one interval:
  -- by then a missing key (a full bucket) says the same as the state.
  redis.call('PEXPIRE', key, ms((burst - tokens) / rate + ivl))
end

`

// luaWindow reads and writes a sliding window: a summary hash (n permits in
// the window, seq the last sequence number) and the log zset.
const luaWindow = `
local function count(member) return tonumber(string.match(member, ':(%d+)$')) end

-- window_load drops the grants that left the window (score <= now - ivl)
-- and returns the permits still in it, the sequence and whether it wrote.
local function window_load(hkey, zkey, ivl)
  local st = redis.call('HMGET', hkey, 'n', 'seq')
  local used, seq = tonumber(st[1]), tonumber(st[2])
  local changed = false
  local old = redis.call('ZRANGEBYSCORE', zkey, '-inf', fmt(now - ivl))
  if #old > 0 then
    redis.call('ZREMRANGEBYSCORE', zkey, '-inf', fmt(now - ivl))
    changed = true
  end
  if used == nil or seq == nil then
    -- No summary (normally: no log either). Rebuild it from the log so a
    -- lost summary never forgets grants, and continue the sequence past
    -- every member so none is overwritten.
    used, seq = 0, 0
    local log = redis.call('ZRANGE', zkey, 0, -1)
    for _, m in ipairs(log) do
      used = used + count(m)
      local s = tonumber(string.match(m, '^(%d+):'))
      if s > seq then seq = s end
    end
    if #log > 0 then changed = true end
  else
    for _, m in ipairs(old) do used = used - count(m) end
    if used < 0 then used = 0 end
  end
  return used, seq, changed
end

local function window_store(hkey, zkey, used, seq, ivl)
  redis.call('HSET', hkey, 'n', string.format('%d', used), 'seq', string.format('%d', seq))
  -- Every grant leaves the window ivl after it was made; the keys outlive
  -- the newest by another ivl.
  redis.call('PEXPIRE', hkey, ms(2 * ivl))
  redis.call('PEXPIRE', zkey, ms(2 * ivl))
end
`

// takeSrc decides a batch of requests.
//
// KEYS: for each request in order, one key (token bucket, pacing) or two
// (sliding window: summary hash, log zset).
// ARGV[1]: for each request seven space-separated tokens:
// algorithm (1 bucket, 2 window, 3 pacing, 4 calendar), n, partial (0/1), limit,
// interval µs, burst, max queue µs.
// Reply: one string "now g wait retry g wait retry ...", µs.
//
// Every request is decided at the same instant, so the script reads each
// budget once, keeps its state in a table while it decides the batch's
// requests for it in order, and writes it once at the end: a batch of k
// requests for one budget (a strict rule's concurrent entries) costs one
// read and one write, not k. A window's grants of one call share their
// time and go into the log as one entry.
const takeSrc = luaLimitClock + luaBucket + luaWindow + `
local tb, tbk = {}, {} -- token buckets: key -> {tokens, rate, burst, ivl}; keys in order
local sw, swk = {}, {} -- windows: summary key -> {zkey, used, seq, changed, pend, ivl}
local gc, gck = {}, {} -- pacing: key -> {tat, px}
local qc, qck = {}, {} -- calendar counts: key -> {used, px, fresh}

local function bucket(key, n, partial, limit, ivl, burst)
  if burst <= 0 then burst = limit end
  local rate = limit / ivl
  local st = tb[key]
  if st == nil then
    st = {tokens = bucket_level(key, rate, burst)}
    tb[key] = st
    tbk[#tbk + 1] = key
  elseif st.tokens > burst then
    st.tokens = burst -- no time passed since the last request: only the cap changes
  end
  st.rate, st.burst, st.ivl = rate, burst, ivl
  local tokens = st.tokens
  local g = 0
  if tokens >= n then g = n
  elseif partial and tokens >= 1 then g = math.floor(tokens) end
  tokens = tokens - g
  st.tokens = tokens
  local rest, retry = n - g, 0
  if rest > 0 and rest <= burst then retry = (rest - tokens) / rate end
  return g, 0, retry
end

-- window_flush writes a window's pending grants into its log as one entry.
local function window_flush(st)
  if st.pend > 0 then
    st.seq = st.seq + 1
    redis.call('ZADD', st.zkey, fmt(now), string.format('%d:%d', st.seq, st.pend))
    st.pend = 0
  end
end

local function window_save(hkey, st)
  window_flush(st)
  if st.changed then window_store(hkey, st.zkey, st.used, st.seq, st.ivl) end
end

local function window(hkey, zkey, n, partial, limit, ivl)
  local st = sw[hkey]
  if st ~= nil and st.ivl ~= ivl then
    -- Other terms for the same key: save, and load again under these.
    window_save(hkey, st)
    st = nil
  end
  if st == nil then
    local used, seq, changed = window_load(hkey, zkey, ivl)
    st = {zkey = zkey, used = used, seq = seq, changed = changed, pend = 0, ivl = ivl}
    if sw[hkey] == nil then swk[#swk + 1] = hkey end
    sw[hkey] = st
  end
  local used = st.used
  local avail = limit - used
  local g = 0
  if n <= avail then g = n
  elseif partial and avail >= 1 then g = math.floor(avail) end
  if g > 0 then
    st.pend = st.pend + g
    used = used + g
    st.used = used
    st.changed = true
  end
  local rest, retry = n - g, 0
  if rest > 0 and rest <= limit then
    -- The rest fits once need permits have left the window: walk the log
    -- from the oldest grant; the grant that frees the last of them leaves
    -- at its score + ivl. The walk is bounded: past 128 grants the answer
    -- is the 128th's departure, a lower bound.
    window_flush(st)
    local need = rest - (limit - used)
    local freed = 0
    local items = redis.call('ZRANGE', zkey, 0, 127, 'WITHSCORES')
    for i = 1, #items, 2 do
      freed = freed + count(items[i])
      retry = tonumber(items[i + 1]) + ivl - now
      if freed >= need then break end
    end
  end
  return g, 0, retry
end

local function pace(key, n, limit, ivl, maxq)
  local T = ivl / limit
  local st = gc[key]
  if st == nil then
    st = {tat = tonumber(redis.call('GET', key))}
    gc[key] = st
  end
  local tat = st.tat
  if tat == nil or tat < now then tat = now end
  local wait = tat - now
  if wait > maxq then return 0, 0, wait - maxq end
  local nt = tat + n * T
  st.tat = nt
  -- The key outlives the last permit it schedules by one interval.
  if st.px == nil then gck[#gck + 1] = key end
  st.px = ms(nt - now + ivl)
  return n, wait, 0
end

-- count decides a calendar budget: at most limit permits in the key, which
-- expires ivl after its first grant (a period's length).
local function count_take(key, n, partial, limit, ivl)
  local st = qc[key]
  if st == nil then
    local used = tonumber(redis.call('GET', key))
    st = {used = used or 0, fresh = used == nil, px = ms(ivl), add = 0}
    qc[key] = st
    qck[#qck + 1] = key
  end
  local avail = limit - st.used
  local g = 0
  if n <= avail then g = n
  elseif partial and avail >= 1 then g = math.floor(avail) end
  st.used = st.used + g
  st.add = st.add + g
  return g, 0, 0
end

local out = {fmt(now)}
local k = 1
local a = {}
for tok in string.gmatch(ARGV[1], '%S+') do
  a[#a + 1] = tok
  if #a == 7 then
    local alg, n, partial = a[1], tonumber(a[2]), a[3] == '1'
    local limit, ivl, burst, maxq = tonumber(a[4]), tonumber(a[5]), tonumber(a[6]), tonumber(a[7])
    local g, w, r
    if alg == '1' then
      g, w, r = bucket(KEYS[k], n, partial, limit, ivl, burst)
      k = k + 1
    elseif alg == '2' then
      g, w, r = window(KEYS[k], KEYS[k + 1], n, partial, limit, ivl)
      k = k + 2
    elseif alg == '4' then
      g, w, r = count_take(KEYS[k], n, partial, limit, ivl)
      k = k + 1
    else
      g, w, r = pace(KEYS[k], n, limit, ivl, maxq)
      k = k + 1
    end
    out[#out + 1] = string.format('%d', g)
    out[#out + 1] = w == 0 and '0' or fmt(w)
    out[#out + 1] = r == 0 and '0' or fmt(r)
    a = {}
  end
end
for _, key in ipairs(tbk) do
  local st = tb[key]
  bucket_store(key, st.tokens, st.rate, st.burst, st.ivl)
end
for _, hkey in ipairs(swk) do window_save(hkey, sw[hkey]) end
for _, key in ipairs(gck) do
  local st = gc[key]
  redis.call('SET', key, fmt(st.tat), 'PX', st.px)
end
for _, key in ipairs(qck) do
  local st = qc[key]
  -- INCRBY keeps the key's expiry (SET would drop it; KEEPTTL needs Redis 6).
  if st.fresh then
    if st.used > 0 then redis.call('SET', key, fmt(st.used), 'PX', st.px) end
  elseif st.add > 0 then
    redis.call('INCRBY', key, st.add)
  end
end
return table.concat(out, ' ')
`

// takeOneSrc decides a lone request for a token bucket or a pacing budget,
// the common call of a strict rule: the same decision as takeSrc's for a
// batch of one, on the same keys, in about 60 % of its Redis time (INFO
// commandstats: no batch bookkeeping, no window helpers). A lone sliding
// window request goes to takeSrc.
//
// KEYS[1]: the budget's key. ARGV[1]: the request's seven tokens, as for
// takeSrc. Reply: "now g wait retry", µs.
const takeOneSrc = luaLimitClock + luaBucket + `
local alg, n, partial, limit, ivl, burst, maxq =
  string.match(ARGV[1], '^(%d) (%S+) ([01]) (%S+) (%S+) (%S+) (%S+)$')
n, limit, ivl, burst, maxq = tonumber(n), tonumber(limit), tonumber(ivl), tonumber(burst), tonumber(maxq)
local key = KEYS[1]
if alg == '1' then
  if burst <= 0 then burst = limit end
  local rate = limit / ivl
  local tokens = bucket_level(key, rate, burst)
  local g = 0
  if tokens >= n then g = n
  elseif partial == '1' and tokens >= 1 then g = math.floor(tokens) end
  tokens = tokens - g
  bucket_store(key, tokens, rate, burst, ivl)
  local rest, retry = n - g, 0
  if rest > 0 and rest <= burst then retry = (rest - tokens) / rate end
  return fmt(now) .. ' ' .. string.format('%d', g) .. ' 0 ' .. (retry == 0 and '0' or fmt(retry))
end
if alg ~= '3' then return redis.error_reply('sluiceredis: takeOne: algorithm ' .. tostring(alg)) end
local T = ivl / limit
local tat = tonumber(redis.call('GET', key))
if tat == nil or tat < now then tat = now end
local wait = tat - now
if wait > maxq then return fmt(now) .. ' 0 0 ' .. fmt(wait - maxq) end
local nt = tat + n * T
-- The key outlives the last permit it schedules by one interval.
redis.call('SET', key, fmt(nt), 'PX', ms(nt - now + ivl))
return fmt(now) .. ' ' .. string.format('%d', n) .. ' ' .. (wait == 0 and '0' or fmt(wait)) .. ' 0'
`

// giveSrc returns permits to one budget.
//
// KEYS: as for one request of takeSrc.
// ARGV: algorithm, n, limit, interval µs, burst.
const giveSrc = luaLimitClock + luaBucket + luaWindow + `
local alg, n = ARGV[1], tonumber(ARGV[2])
local limit, ivl, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if alg == '1' then
  if burst <= 0 then burst = limit end
  local rate = limit / ivl
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end -- already full
  local tokens = bucket_level(KEYS[1], rate, burst) + n
  if tokens > burst then tokens = burst end
  bucket_store(KEYS[1], tokens, rate, burst, ivl)
elseif alg == '2' then
  local hkey, zkey = KEYS[1], KEYS[2]
  local used, seq, changed = window_load(hkey, zkey, ivl)
  local rem = n
  -- Forget the rem most recent permits: newest grants first, the last one
  -- touched keeps what is left of it (rewritten under a new sequence).
  while rem > 0 do
    local top = redis.call('ZREVRANGE', zkey, 0, 15, 'WITHSCORES')
    if #top == 0 then break end
    for i = 1, #top, 2 do
      local c = count(top[i])
      redis.call('ZREM', zkey, top[i])
      changed = true
      if c <= rem then
        rem = rem - c
        used = used - c
      else
        seq = seq + 1
        redis.call('ZADD', zkey, top[i + 1], string.format('%d:%d', seq, c - rem))
        used = used - rem
        rem = 0
      end
      if rem == 0 then break end
    end
  end
  if used < 0 then used = 0 end
  if changed then window_store(hkey, zkey, used, seq, ivl) end
elseif alg == '4' then
  local used = tonumber(redis.call('GET', KEYS[1]))
  if used == nil then return 0 end -- expired: nothing to give back
  if n > used then n = used end
  if n > 0 then redis.call('DECRBY', KEYS[1], n) end -- keeps the expiry
else
  local T = ivl / limit
  local tat = tonumber(redis.call('GET', KEYS[1]))
  if tat == nil or tat <= now then return 0 end -- nothing scheduled
  -- Unschedule the n latest permits, never into the past.
  local nt = tat - n * T
  if nt < now then nt = now end
  redis.call('SET', KEYS[1], fmt(nt), 'PX', ms(nt - now + ivl))
end
return 0
`

// beatSrc records a heartbeat.
//
// KEYS[1]: the app's index zset (member id, score expiry ms);
// KEYS[2]: the member's hash; KEYS[3]: the index's epoch (a string).
// ARGV: id, ttl ms, host, started (Unix ns, "" if unknown), rule version.
// Reply: the number of live members and the epoch. The epoch is made
// (from Redis's clock) when the key is missing and lives as long as the
// index, so it changes exactly when the index was lost: a restart without
// its data, or every member expired.
const beatSrc = `
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'host', ARGV[3], 'started', ARGV[4], 'rv', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- The index, and its epoch, live as long as its longest-lived member.
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local left = math.max(1, tonumber(last[2]) - now)
redis.call('PEXPIRE', KEYS[1], left)
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  epoch = clock[1] .. string.format('%06d', tonumber(clock[2]))
  redis.call('SET', KEYS[3], epoch)
end
redis.call('PEXPIRE', KEYS[3], left)
return {redis.call('ZCARD', KEYS[1]), epoch}
`

// leaveSrc removes a member from an app's live set.
//
// KEYS[1]: the app's index zset; KEYS[2]: the member's hash. ARGV[1]: id.
// Reply: the number of live members left.
const leaveSrc = `
if redis.replicate_commands then redis.replicate_commands() end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return redis.call('ZCARD', KEYS[1])
`

// membersSrc lists the live members of an app.
//
// KEYS[1]: the app's index zset. ARGV[1]: the stem of its member keys (the
// member's id follows); they share KEYS[1]'s hash tag, hence its slot.
// Reply: id, host, started, rule version for each live member.
const membersSrc = `
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local m = redis.call('HMGET', ARGV[1] .. id, 'host', 'started', 'rv')
  if m[1] == false then
    redis.call('ZREM', KEYS[1], id) -- its record expired or was deleted
  else
    out[#out + 1] = id
    out[#out + 1] = m[1]
    out[#out + 1] = m[2] or ''
    out[#out + 1] = m[3] or ''
  end
end
return out
`

var (
	takeScript    = redis.NewScript(takeSrc)
	takeOneScript = redis.NewScript(takeOneSrc)
	giveScript    = redis.NewScript(giveSrc)
	beatScript    = redis.NewScript(beatSrc)
	membersScript = redis.NewScript(membersSrc)
	leaveScript   = redis.NewScript(leaveSrc)
	allScripts    = []*redis.Script{takeScript, takeOneScript, giveScript, beatScript, membersScript, leaveScript}
)
