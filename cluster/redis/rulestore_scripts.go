package sluiceredis

import "github.com/redis/go-redis/v9"

// The rule store's and telemetry's scripts. Each key of one application
// shares the application's hash tag; keys built from a stem in ARGV share
// KEYS[1]'s tag, hence its Cluster slot. Times are read from Redis's TIME
// and written with %.0f (Lua's tostring would print 1.7e+15).

// luaClock defines now_us (µs, a string) and now_ms (ms, a number).
const luaClock = `
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = string.format('%.0f', tonumber(clock[1]) * 1000000 + tonumber(clock[2]))
local function keytype(k) return redis.call('TYPE', k)['ok'] end
`

// currentSrc reads the version in force.
//
// KEYS[1]: the app's current-version string. ARGV[1]: the stem of its
// version hashes. Reply: n, doc, author, comment, at, rollbackOf; or empty.
const currentSrc = `
local n = redis.call('GET', KEYS[1])
if not n then return {} end
local v = redis.call('HMGET', ARGV[1] .. n, 'doc', 'author', 'comment', 'at', 'rb')
if not v[1] then return {} end
return {n, v[1], v[2] or '', v[3] or '', v[4] or '0', v[5] or '0'}
`

// historySrc reads the newest versions.
//
// KEYS[1]: the app's history list (version numbers, newest first).
// ARGV[1]: the stem of its version hashes; ARGV[2]: how many.
// Reply: n, doc, author, comment, at, rollbackOf for each version.
const historySrc = `
local out = {}
for _, n in ipairs(redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)) do
  local v = redis.call('HMGET', ARGV[1] .. n, 'doc', 'author', 'comment', 'at', 'rb')
  if v[1] then
    out[#out + 1] = n
    out[#out + 1] = v[1]
    out[#out + 1] = v[2] or ''
    out[#out + 1] = v[3] or ''
    out[#out + 1] = v[4] or '0'
    out[#out + 1] = v[5] or '0'
  end
end
return out
`

// saveSrc writes a new version if the base is current.
//
// KEYS[1]: current-version string; KEYS[2]: history list; KEYS[3]: the
// app's audit list. ARGV: base, version-hash stem, doc, author, comment,
// rollbackOf, history length, audit length, audit entry JSON, channel.
// Reply: {0, current, 0} on conflict; {1, n, at µs} once written.
//
// Everything that could fail is checked before the first write (key
// types), and the version goes into force (SET) only after its hash,
// history and audit entry are written; from the first write on, Redis
// runs the script to its end even over maxmemory.
const saveSrc = luaClock + `
local t = keytype(KEYS[1])
if t ~= 'none' and t ~= 'string' then return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. t) end
for i = 2, 3 do
  t = keytype(KEYS[i])
  if t ~= 'none' and t ~= 'list' then return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' is a ' .. t) end
end
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur ~= tonumber(ARGV[1]) then return {0, cur, 0} end
local n = string.format('%d', cur + 1)
local vkey = ARGV[2] .. n
redis.call('DEL', vkey)
redis.call('HSET', vkey, 'doc', ARGV[3], 'author', ARGV[4], 'comment', ARGV[5], 'at', now_us, 'rb', ARGV[6])
redis.call('LPUSH', KEYS[3], now_us .. ' ' .. n .. ' ' .. ARGV[9])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[8]) - 1)
redis.call('LREM', KEYS[2], 0, n)
redis.call('LPUSH', KEYS[2], n)
redis.call('SET', KEYS[1], n)
local keep = tonumber(ARGV[7])
while redis.call('LLEN', KEYS[2]) > keep do
  redis.call('DEL', ARGV[2] .. redis.call('RPOP', KEYS[2]))
end
redis.call('PUBLISH', ARGV[10], n)
return {1, tonumber(n), tonumber(now_us)}
`

// luaPrune defines prune(idx, hash): it drops the members of the zset idx
// (scored by expiry, ms) that expired, and their fields of the hash hash
// (nil: none), and makes both expire with the longest-lived member.
const luaPrune = `
local function prune(idx, hash)
  if hash then
    local dead = redis.call('ZRANGEBYSCORE', idx, '-inf', now_ms)
    for i = 1, #dead, 1000 do
      redis.call('HDEL', hash, unpack(dead, i, math.min(i + 999, #dead)))
    end
  end
  redis.call('ZREMRANGEBYSCORE', idx, '-inf', now_ms)
  local last = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
  if last[2] then
    local ttl = math.max(1, tonumber(last[2]) - now_ms)
    redis.call('PEXPIRE', idx, ttl)
    if hash then redis.call('PEXPIRE', hash, ttl) end
  end
end
`

// reportSrc records an instance's report.
//
// KEYS[1]: the app's report index (zset: instance, expiry ms); KEYS[2]: its
// reports (hash: instance -> "<at ms> <json>"). ARGV: instance, ttl ms,
// report JSON.
const reportSrc = luaClock + luaPrune + `
redis.call('HSET', KEYS[2], ARGV[1], string.format('%.0f', now_ms) .. ' ' .. ARGV[3])
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
prune(KEYS[1], KEYS[2])
return 0
`

// reportsSrc returns the unexpired reports. KEYS as reportSrc's.
const reportsSrc = luaClock + luaPrune + `
prune(KEYS[1], KEYS[2])
return redis.call('HVALS', KEYS[2])
`

// auditSrc appends an audit entry. KEYS[1]: the audit list. ARGV: version,
// entry JSON, list length.
const auditSrc = luaClock + `
redis.call('LPUSH', KEYS[1], now_us .. ' ' .. ARGV[1] .. ' ' .. ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return 0
`

// publishSrc records a telemetry frame.
//
// KEYS[1]: the app's instance index (zset: instance, expiry ms); KEYS[2]:
// the instance's frame list (newest first, "<second> <json>"); KEYS[3]:
// its newest frame, whole. ARGV: instance, frame (as listed), keep, ttl
// ms, the frame whole.
const publishSrc = luaClock + luaPrune + `
local ttl = tonumber(ARGV[4])
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('SET', KEYS[3], ARGV[5], 'PX', ttl)
redis.call('ZADD', KEYS[1], now_ms + ttl, ARGV[1])
prune(KEYS[1], nil)
return 0
`

// framesSrc returns the kept frames of an app's live instances from a
// second on.
//
// KEYS[1]: the app's instance index. ARGV: the stem of the frame lists,
// the first second. Reply: the frames, by instance, newest first.
const framesSrc = luaClock + luaPrune + `
prune(KEYS[1], nil)
local since = tonumber(ARGV[2])
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  for _, f in ipairs(redis.call('LRANGE', ARGV[1] .. id, 0, -1)) do
    local sec = tonumber(string.match(f, '^(%-?%d+) '))
    if sec == nil or sec < since then break end
    out[#out + 1] = f
  end
end
return out
`

// latestSrc returns the newest whole frame of each of an app's live
// instances. KEYS[1]: the app's instance index. ARGV: the stem of the
// newest frames' keys.
const latestSrc = luaClock + luaPrune + `
prune(KEYS[1], nil)
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local f = redis.call('GET', ARGV[1] .. id)
  if f then out[#out + 1] = f end
end
return out
`

var (
	latestScript  = redis.NewScript(latestSrc)
	currentScript = redis.NewScript(currentSrc)
	historyScript = redis.NewScript(historySrc)
	saveScript    = redis.NewScript(saveSrc)
	reportScript  = redis.NewScript(reportSrc)
	reportsScript = redis.NewScript(reportsSrc)
	auditScript   = redis.NewScript(auditSrc)
	publishScript = redis.NewScript(publishSrc)
	framesScript  = redis.NewScript(framesSrc)
)

// fleetAppsSrc and fleetNoteSrc keep an index of the applications whose
// instances publish frames or heartbeats: a sorted set of names scored by
// their expiry on Redis's clock, pruned on every call, holding at most a
// bounded number of names (the soonest to expire go first) and expiring
// with its longest-lived name.
//
// fleetNoteSrc: KEYS[1]: the index. ARGV: app, ttl ms, most names.
const fleetNoteSrc = luaClock + `
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, over - 1) end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now_ms)) end
return 0
`

// fleetAppsSrc: KEYS[1]: the index. ARGV: most names. Reply: the live names.
const fleetAppsSrc = luaClock + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
`

// retireSrc deletes an application's rules. KEYS: the current version,
// the history, the report index, the reports, the audit list. ARGV: the
// stem of the version hashes. Reply: the version that was in force.
const retireSrc = `
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local hist = redis.call('LRANGE', KEYS[2], 0, -1)
for _, n in ipairs(hist) do redis.call('DEL', ARGV[1] .. n) end
if cur > 0 then redis.call('DEL', ARGV[1] .. cur) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return cur
`

var (
	fleetNoteScript = redis.NewScript(fleetNoteSrc)
	fleetAppsScript = redis.NewScript(fleetAppsSrc)
	retireScript    = redis.NewScript(retireSrc)
)
