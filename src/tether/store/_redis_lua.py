"""The server-side scripts of the Redis backend: every write is one of these, run atomically by
Redis (``EVALSHA`` of a script loaded once; redis-py reloads it on ``NOSCRIPT``).

Every script takes ``ARGV[1]`` = the store's key prefix and ``ARGV[2]`` = the tenant, escaped as
:func:`tether.store._redis_keys.escape` escapes it, and builds the keys it touches from them (see
that module for the layout). Its own arguments follow from ``ARGV[3]``. A refusal is returned, never
raised, so the Python side can name it with the store's usual errors; a script writes only after
every check has passed, so a refusal leaves the database as it was.

Each write that could make a task runnable or change what a waiter looks for ends with a
``PUBLISH`` on ``<prefix>:chg``, and one that may have made a task claimable (it entered or moved
in the due index with no lease on it, or its lease was given back while it is due) on
``<prefix>:run`` as well: the wake-up is part of the same atomic step as the write.
"""

from __future__ import annotations

from tether.store.base import FINISHED

EXPIRING = FINISHED
"""The statuses after which a stream may expire: a finished task's. A session never does, closed or
not: a task that has not finished may still read it (its record names the session's seqs, and a
replay reads them), and nothing holds a session for its tasks the way a fork holds its parent."""

__all__ = [
    "APPEND",
    "CLAIM",
    "COMPACT",
    "CREATE",
    "DELETE",
    "LEASE",
    "LEDGER_BEGIN",
    "LEDGER_FINISH",
    "PARK",
    "PRUNE",
    "RECORD_WORKER",
    "RELEASE",
    "RENEW",
    "REWIND",
    "SNAPSHOT",
]

# Shared by every script: key names, the due index and the wake-up.
#  due   ZSET task id -> when a claim may take it (TaskRow.due_at), only for tasks a claim may take at all
#  held  SET of the task ids whose lease has an owner (what lease_holders reads)
#  tasks ZSET task id -> created_at (listing, newest first)
#  exp   ZSET task id -> when its keys expire (ms), for the tasks whose keys carry an expiry
_PRELUDE = """
local P, ET = ARGV[1], ARGV[2]
local CLAIMABLE = false  -- set when this script may have made a task claimable: publish() says so
local TB = P .. ':{' .. ET .. '}'
local DUE, HELD, TASKS = TB .. ':due', TB .. ':held', TB .. ':tasks'
local function esc(s)
  return (string.gsub(s, '[%%:{}]', function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function tk(id) return P .. ':{' .. ET .. ':' .. esc(id) .. '}' end
local function reindex(id)
  local r = tk(id) .. ':r'
  local f = redis.call('HMGET', r, 'type', 'status', 'wake_at', 'created_at', 'parked', 'lease_owner')
  if not f[1] then
    redis.call('ZREM', DUE, id)
    redis.call('SREM', HELD, id)
    return
  end
  if f[6] then redis.call('SADD', HELD, id) else redis.call('SREM', HELD, id) end
  local at = false
  if string.sub(f[1], 1, 7) ~= 'tether.' and not f[5] then
    if f[2] == 'pending' or f[2] == 'running' then at = f[3] or f[4]
    elseif f[2] == 'sleeping' or f[2] == 'awaiting_input' then at = f[3] end
  end
  if at then
    -- A task entered the due index or moved in it with no lease on it: a claim may take it now (or
    -- at its new time). One leased is not until its lease is given back (RELEASE says so then) or
    -- runs out (which no write tells: the workers' poll finds it, as it finds sleeps that fall due).
    if redis.call('ZADD', DUE, 'CH', at, id) == 1 and not f[6] then CLAIMABLE = true end
  else
    redis.call('ZREM', DUE, id)
  end
end
-- Every commit is told on ``chg`` (what readers following tasks wait on); one that may have made
-- a task claimable on ``run`` too (what idle workers wait on), so that a run's appends under its
-- lease wake no idle worker.
local function publish()
  redis.call('PUBLISH', P .. ':chg', ET)
  if CLAIMABLE then redis.call('PUBLISH', P .. ':run', ET) end
end
-- Retention. A finished stream's row holds ``x``, when it expires (server ms, set by the store that
-- finished it, when that store has a ttl); its keys expire at the later of that and its forks'
-- expiries, and not at all while a fork is unfinished (or finished with no expiry): a fork reads its
-- parent's events. EXP (id -> that time) is how listings find the index entries to prune.
local EXP = TB .. ':exp'
local FIN = {FINISHED_STATUSES}
local OWN = {':r', ':e', ':s', ':k'}
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function forks(b)
  local kids = redis.call('SMEMBERS', b .. ':k')
  local live = {}
  for _, kid in ipairs(kids) do
    if redis.call('EXISTS', tk(kid) .. ':r') == 1 then live[#live + 1] = kid
    else redis.call('SREM', b .. ':k', kid) end
  end
  return live
end
local function settle(id, up)
  local b = tk(id)
  local f = redis.call('HMGET', b .. ':r', 'status', 'x', 'parent_id')
  if not f[1] then return end
  local at = FIN[f[1]] and f[2] and tonumber(f[2])
  if at then
    for _, kid in ipairs(forks(b)) do
      local until_ = redis.call('ZSCORE', EXP, kid)
      if not until_ then at = false break end
      at = math.max(at, tonumber(until_))
    end
  end
  if at then
    for _, s in ipairs(OWN) do redis.call('PEXPIREAT', b .. s, at) end
    redis.call('ZADD', EXP, at, id)
  elseif redis.call('PTTL', b .. ':r') >= 0 or redis.call('ZSCORE', EXP, id) then
    for _, s in ipairs(OWN) do redis.call('PERSIST', b .. s) end
    redis.call('ZREM', EXP, id)
  end
  if up and f[3] then settle(f[3], true) end
end
local function finish(r, old, new, ttl)
  if not FIN[new] then redis.call('HDEL', r, 'x')
  elseif ttl > 0 and not FIN[old or ''] then redis.call('HSET', r, 'x', now_ms() + ttl) end
end
local function held(owner, expires, now)
  return owner and (not expires or tonumber(expires) > tonumber(now))
end
""".replace("FINISHED_STATUSES", ", ".join(f"{status} = true" for status in sorted(EXPIRING)))

# One stream or several, all or nothing. ARGV[3] = how many streams, ARGV[4] = the append's own
# random id; then per stream 18 values and its events: id, expected, fence ('' none), n events,
# completes among them, last seq, last at, has index ('1'/'0'), moves, status given, status, wake_at
# ('' none), has head, head calls, head summary, has output, output, the session the row names if it
# names none ('' none); ARGV[5] = the store's ttl in ms
# (0 none), applied to a stream this append finishes. The same append sent again (a
# retry after its reply was lost to a dropped connection) finds its id on the rows it moved last
# and is taken as done, not refused as a conflict with itself.
APPEND = (
    _PRELUDE
    + """
local n = tonumber(ARGV[3])
local nonce, ttl = ARGV[4], tonumber(ARGV[5])
local parts, pos = {}, 6
for i = 1, n do
  local p = {}
  for j = 1, 18 do p[j] = ARGV[pos + j - 1] end
  p.first = pos + 18
  pos = pos + 18 + tonumber(p[4])
  parts[i] = p
end
local done = 0
for i, p in ipairs(parts) do
  local b = tk(p[1])
  local f = redis.call('HMGET', b .. ':r', 'lease_token', 'version', 'w', 'status')
  if not f[2] then return {'missing', i} end
  p.old = f[4]
  local token = tonumber(f[1] or '0')
  if p[3] ~= '' and token ~= tonumber(p[3]) then return {'fence', i, token} end
  local version = tonumber(f[2])
  if version ~= tonumber(p[2]) then
    if version ~= tonumber(p[6]) or f[3] ~= nonce then return {'version', i, version} end
    done = done + 1
  end
end
if done == n then return {'ok'} end
if done > 0 then return {'version', 1, -1} end  -- cannot be: one script wrote all its parts or none
for _, p in ipairs(parts) do
  local b = tk(p[1])
  local r = b .. ':r'
  for k = p.first, p.first + tonumber(p[4]) - 1 do redis.call('RPUSH', b .. ':e', ARGV[k]) end
  redis.call('HSET', r, 'version', p[6], 'updated_at', p[7], 'w', nonce)
  redis.call('HINCRBY', r, 'calls_done', p[5])
  if p[8] == '1' then
    if p[9] == '1' then
      if p[10] == '1' then
        redis.call('HSET', r, 'status', p[11])
        finish(r, p.old, p[11], ttl)
        settle(p[1], true)
      end
      if p[12] == '' then redis.call('HDEL', r, 'wake_at') else redis.call('HSET', r, 'wake_at', p[12]) end
      redis.call('HDEL', r, 'parked')
    end
    if p[13] == '1' then
      redis.call('HSET', r, 'calls_done', p[14], 'summary', p[15])
      if p[16] == '1' then redis.call('HSET', r, 'output', p[17]) else redis.call('HDEL', r, 'output') end
    end
    if p[18] ~= '' then redis.call('HSETNX', r, 'session_id', p[18]) end
  end
  reindex(p[1])
end
publish()
return {'ok'}
"""
)

# ARGV: id, parent id ('' none), created_at, first event, then the row's field/value pairs.
CREATE = (
    _PRELUDE
    + """
local id, parent = ARGV[3], ARGV[4]
local b = tk(id)
if redis.call('EXISTS', b .. ':r') == 1 then return 'exists' end
if parent ~= '' and redis.call('EXISTS', tk(parent) .. ':r') == 0 then return 'noparent' end
for k = 7, #ARGV, 2 do redis.call('HSET', b .. ':r', ARGV[k], ARGV[k + 1]) end
redis.call('RPUSH', b .. ':e', ARGV[6])
redis.call('ZADD', TASKS, ARGV[5], id)
if parent ~= '' then redis.call('SADD', tk(parent) .. ':k', id) end
reindex(id)
settle(id, true)
publish()
return 'ok'
"""
)

# ARGV: id, owner, expires, now, steal ('1'/'0'), steal_from, at_version ('' none).
# Returns the new token, 0 when the lease is held, -1 when there is no such task.
LEASE = (
    _PRELUDE
    + """
local r = tk(ARGV[3]) .. ':r'
local f = redis.call('HMGET', r, 'lease_owner', 'lease_expires', 'version')
if not f[3] then return -1 end
local moved = ARGV[9] ~= '' and tonumber(f[3]) ~= tonumber(ARGV[9])
if held(f[1], f[2], ARGV[6]) and (ARGV[7] ~= '1' or f[1] ~= ARGV[8] or moved) then return 0 end
local token = redis.call('HINCRBY', r, 'lease_token', 1)
redis.call('HSET', r, 'lease_owner', ARGV[4], 'lease_expires', ARGV[5])
reindex(ARGV[3])
return token
"""
)

# ARGV: owner, expires, now. The due index in order (oldest due first, ties by id), past the tasks
# whose lease is live. Returns {id, token} or false.
CLAIM = (
    _PRELUDE
    + """
local offset = 0
while true do
  local ids = redis.call('ZRANGEBYSCORE', DUE, '-inf', ARGV[5], 'LIMIT', offset, 64)
  if #ids == 0 then return false end
  for _, id in ipairs(ids) do
    local r = tk(id) .. ':r'
    local f = redis.call('HMGET', r, 'lease_owner', 'lease_expires')
    if not held(f[1], f[2], ARGV[5]) then
      local token = redis.call('HINCRBY', r, 'lease_token', 1)
      redis.call('HSET', r, 'lease_owner', ARGV[3], 'lease_expires', ARGV[4])
      redis.call('SADD', HELD, id)
      return {id, token}
    end
  end
  offset = offset + 64
end
"""
)

# ARGV: worker id, seen at, its record packed, the oldest seen time kept. Keeps the record (the hash
# ``workers``, by id) and when it was seen (the ZSET ``wseen``), and drops the records seen before then.
RECORD_WORKER = (
    _PRELUDE
    + """
local W, WS = TB .. ':workers', TB .. ':wseen'
redis.call('HSET', W, ARGV[3], ARGV[5])
redis.call('ZADD', WS, ARGV[4], ARGV[3])
local old = redis.call('ZRANGEBYSCORE', WS, '-inf', '(' .. ARGV[6])
if #old > 0 then
  redis.call('HDEL', W, unpack(old))
  redis.call('ZREMRANGEBYSCORE', WS, '-inf', '(' .. ARGV[6])
end
return 1
"""
)

# ARGV: id, version, reason. 1 when parked.
PARK = (
    _PRELUDE
    + """
local r = tk(ARGV[3]) .. ':r'
local v = redis.call('HGET', r, 'version')
if not v or tonumber(v) ~= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', r, 'parked', ARGV[5])
reindex(ARGV[3])
return 1
"""
)

# ARGV: id, token, expires. 1 renewed, 0 taken over, -1 no such task.
RENEW = (
    _PRELUDE
    + """
local r = tk(ARGV[3]) .. ':r'
local f = redis.call('HMGET', r, 'lease_token', 'lease_owner', 'version')
if not f[3] then return -1 end
if tonumber(f[1] or '0') ~= tonumber(ARGV[4]) or not f[2] then return 0 end
redis.call('HSET', r, 'lease_expires', ARGV[5])
return 1
"""
)

# ARGV: id, token. 1 released or not held by it, -1 no such task.
RELEASE = (
    _PRELUDE
    + """
local r = tk(ARGV[3]) .. ':r'
local f = redis.call('HMGET', r, 'lease_token', 'version')
if not f[2] then return -1 end
if tonumber(f[1] or '0') == tonumber(ARGV[4]) then
  redis.call('HDEL', r, 'lease_owner', 'lease_expires')
  reindex(ARGV[3])
  if redis.call('ZSCORE', DUE, ARGV[3]) then CLAIMABLE = true end  -- given back unfinished: claimable
end
publish()
return 1
"""
)

# ARGV: id, expected, completes, last seq, last at, events...
COMPACT = (
    _PRELUDE
    + """
local id = ARGV[3]
local b = tk(id)
local r = b .. ':r'
local f = redis.call('HMGET', r, 'version', 'parent_id')
if not f[1] then return {'missing'} end
if tonumber(f[1]) ~= tonumber(ARGV[4]) then return {'version', tonumber(f[1])} end
if #forks(b) > 0 then return {'forked'} end
local gone = redis.call('LLEN', b .. ':e')
redis.call('DEL', b .. ':e', b .. ':s')
for k = 8, #ARGV do redis.call('RPUSH', b .. ':e', ARGV[k]) end
if f[2] then redis.call('SREM', tk(f[2]) .. ':k', id) end
redis.call('HDEL', r, 'parent_id', 'parent_seq')
redis.call('HSET', r, 'base', ARGV[4], 'version', ARGV[6], 'updated_at', ARGV[7])
redis.call('HINCRBY', r, 'calls_done', ARGV[5])
settle(id, false)  -- the new event list carries the stream's expiry, if it has one
if f[2] then settle(f[2], true) end  -- no longer read by this stream: the parent may expire sooner
publish()
return {'ok', gone}
"""
)

# ARGV: id. Returns {'ok', events gone}, or a refusal.
DELETE = (
    _PRELUDE
    + """
local id = ARGV[3]
local b = tk(id)
local f = redis.call('HMGET', b .. ':r', 'version', 'parent_id')
if not f[1] then return {'missing'} end
if #forks(b) > 0 then return {'forked'} end
local gone = redis.call('LLEN', b .. ':e')
redis.call('DEL', b .. ':r', b .. ':e', b .. ':s', b .. ':k')
redis.call('ZREM', TASKS, id)
redis.call('ZREM', DUE, id)
redis.call('ZREM', EXP, id)
redis.call('SREM', HELD, id)
if f[2] then
  redis.call('SREM', tk(f[2]) .. ':k', id)
  settle(f[2], true)
end
return {'ok', gone}
"""
)

# ARGV: id, expected, archive id, archived event, its seq, its at, its completes, the finished
# statuses (comma-separated), the fork's created_at, its first event, the store's ttl in ms (0 none),
# then the fork row's pairs.
REWIND = (
    _PRELUDE
    + """
local id, archive = ARGV[3], ARGV[5]
local b, a = tk(id), tk(archive)
local f = redis.call('HMGET', b .. ':r', 'version', 'status', 'parent_id', 'created_at')
if not f[1] then return {'missing'} end
if tonumber(f[1]) ~= tonumber(ARGV[4]) then return {'version', tonumber(f[1])} end
if redis.call('EXISTS', a .. ':r') == 1 then return {'archive_exists'} end
for _, s in ipairs({':r', ':e', ':s', ':k'}) do
  if redis.call('EXISTS', b .. s) == 1 then redis.call('RENAME', b .. s, a .. s) end
end
local ar = a .. ':r'
redis.call('HDEL', ar, 'wake_at', 'lease_owner', 'lease_expires')
if not string.find(',' .. ARGV[10] .. ',', ',' .. f[2] .. ',', 1, true) then
  redis.call('HSET', ar, 'status', 'cancelled')
  finish(ar, f[2], 'cancelled', tonumber(ARGV[13]))
end
redis.call('RPUSH', a .. ':e', ARGV[6])
redis.call('HSET', ar, 'version', ARGV[7], 'updated_at', ARGV[8])
redis.call('HINCRBY', ar, 'calls_done', ARGV[9])
for _, kid in ipairs(redis.call('SMEMBERS', a .. ':k')) do
  redis.call('HSET', tk(kid) .. ':r', 'parent_id', archive)
end
if f[3] then
  redis.call('SREM', tk(f[3]) .. ':k', id)
  redis.call('SADD', tk(f[3]) .. ':k', archive)
end
redis.call('ZREM', TASKS, id)
redis.call('ZADD', TASKS, f[4], archive)
for k = 14, #ARGV, 2 do redis.call('HSET', b .. ':r', ARGV[k], ARGV[k + 1]) end
redis.call('RPUSH', b .. ':e', ARGV[12])
redis.call('ZADD', TASKS, ARGV[11], id)
redis.call('SADD', a .. ':k', id)
reindex(archive)
reindex(id)
-- The archive's keys came with the old stream's expiry (RENAME keeps it); its new fork holds them now.
settle(id, true)
publish()
return {'ok'}
"""
)

# ARGV: id, seq, packed snapshot, replaces ('' none). 0 when there is no such task.
SNAPSHOT = (
    _PRELUDE
    + """
local b = tk(ARGV[3])
if redis.call('EXISTS', b .. ':r') == 0 then return 0 end
redis.call('HSET', b .. ':s', ARGV[4], ARGV[5])
if ARGV[6] ~= '' and ARGV[6] ~= ARGV[4] then redis.call('HDEL', b .. ':s', ARGV[6]) end
settle(ARGV[3], false)  -- a snapshot hash made just now carries the stream's expiry, if it has one
return 1
"""
)

# No arguments of its own. Drops the tenant's index entries (listing, due, held, exp) of streams
# whose keys have expired, up to 256 of them; returns how many entries of ``exp`` it looked at (256:
# run it again). An entry of a stream that no longer expires (persisted, or made again under its id)
# leaves ``exp``; one whose expiry moved takes its new time.
PRUNE = (
    _PRELUDE
    + """
local ids = redis.call('ZRANGEBYSCORE', EXP, '-inf', '(' .. now_ms(), 'LIMIT', 0, 256)
for _, id in ipairs(ids) do
  local left = redis.call('PTTL', tk(id) .. ':r')
  if left == -2 then
    redis.call('ZREM', TASKS, id)
    redis.call('ZREM', DUE, id)
    redis.call('ZREM', EXP, id)
    redis.call('SREM', HELD, id)
  elseif left == -1 then
    redis.call('ZREM', EXP, id)
  else
    redis.call('ZADD', EXP, now_ms() + left, id)
  end
end
return #ids
"""
)

# KEYS[1] = the ledger entry; ARGV: now. The row as it was ({'new'} for a new key).
LEDGER_BEGIN = """
local k = KEYS[1]
local f = redis.call('HMGET', k, 'status', 'result', 'started_at', 'finished_at', 'runs')
if not f[1] then
  redis.call('HSET', k, 'status', 'started', 'started_at', ARGV[1], 'runs', 1)
  return {'new'}
end
if f[1] == 'started' then redis.call('HINCRBY', k, 'runs', 1) end
return f
"""

# KEYS[1] = the ledger entry; ARGV: result, now. The row that stands.
LEDGER_FINISH = """
local k = KEYS[1]
local f = redis.call('HMGET', k, 'status', 'result', 'started_at', 'finished_at', 'runs')
if f[1] == 'done' then return f end
local started, runs = f[3] or ARGV[2], f[5] or '1'
redis.call('HSET', k, 'status', 'done', 'result', ARGV[1], 'started_at', started, 'finished_at', ARGV[2], 'runs', runs)
return {'done', ARGV[1], started, ARGV[2], runs}
"""
