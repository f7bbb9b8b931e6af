package sluiceredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// sufSlots is the key suffix of a fleet-wide concurrency budget: a sorted
// set of the slots in flight, member the holder (holder#i for its i-th slot
// beyond the first), score its lease's deadline in µs on the server's
// clock (TIME).
const sufSlots = ":conc"

// luaSlotsHead reads the server's clock and defines the helpers of the
// slot scripts.
const luaSlotsHead = `
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- keep makes key outlive the deadline dl (µs), never shortening it.
local function keep(key, dl)
  local want = math.ceil((dl - now) / 1000) + 1000
  if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, want) end
end

local function member(holder, i)
  if i == 1 then return holder end
  return holder .. '#' .. i
end
`

// acquireSlotSrc: KEYS[1] the set; ARGV holder, n, limit, ttl µs. Expired
// leases are reclaimed first; the holder's n members are added when the
// live members leave room for them. Returns {admitted 0/1, live after}.
const acquireSlotSrc = luaSlotsHead + `
local key, holder = KEYS[1], ARGV[1]
local n, limit, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local used = redis.call('ZCARD', key)
if used + n > limit then return {0, used} end
local dl = now + ttl
for i = 1, n do redis.call('ZADD', key, dl, member(holder, i)) end
keep(key, dl)
return {1, used + n}
`

// releaseSlotSrc: KEYS[1] the set; ARGV holder, n. Removes the holder's
// members only. Returns how many were there.
const releaseSlotSrc = luaSlotsHead + `
local gone = 0
for i = 1, tonumber(ARGV[2]) do gone = gone + redis.call('ZREM', KEYS[1], member(ARGV[1], i)) end
return gone
`

// renewSlotsSrc: KEYS[1] the set; ARGV ttl µs, add 0/1, then pairs of
// holder and n. Sets each member's deadline to now+ttl: without add only
// members still live (an expired one is a lost lease, counted), with add
// every one. Returns the members that were missing or expired.
const renewSlotsSrc = luaSlotsHead + `
local key = KEYS[1]
local dl = now + tonumber(ARGV[1])
local add = ARGV[2] == '1'
local missing = 0
for j = 3, #ARGV, 2 do
  for i = 1, tonumber(ARGV[j + 1]) do
    local m = member(ARGV[j], i)
    local s = redis.call('ZSCORE', key, m)
    if not s or tonumber(s) <= now then missing = missing + 1 end
    if add or (s and tonumber(s) > now) then redis.call('ZADD', key, dl, m) end
  end
end
if add or missing < (#ARGV - 2) then keep(key, dl) end
return missing
`

// countSlotsSrc: KEYS[1] the set. Returns the live members.
const countSlotsSrc = luaSlotsHead + `
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
`

var (
	acquireSlotScript = redis.NewScript(acquireSlotSrc)
	releaseSlotScript = redis.NewScript(releaseSlotSrc)
	renewSlotsScript  = redis.NewScript(renewSlotsSrc)
	countSlotsScript  = redis.NewScript(countSlotsSrc)
)

// slotsKey is the set of concurrency budget key.
func (s *Store) slotsKey(key string) string {
	return s.prefix + ":{" + escapeTag(key) + "}" + sufSlots
}

// maxSlots bounds a concurrency limit and an entry's slots.
const maxSlots = 1 << 30

func checkSlot(key, holder string, n int64, ttl time.Duration) error {
	switch {
	case key == "" || holder == "":
		return errors.New("sluiceredis: slot: empty key or holder")
	case n < 1 || n > maxSlots:
		return fmt.Errorf("sluiceredis: slot %q: %d slots, want 1 to %d", key, n, maxSlots)
	case ttl < time.Millisecond:
		return fmt.Errorf("sluiceredis: slot %q: lease %v shorter than 1ms", key, ttl)
	}
	return nil
}

// AcquireSlot takes n of the limit slots of fleet-wide concurrency budget
// key for holder, with a lease of ttl on the server's clock, when the
// live slots leave room (expired leases are reclaimed first). It returns
// whether it did and the live slots after the decision. One script call.
func (s *Store) AcquireSlot(ctx context.Context, key, holder string, n, limit int64, ttl time.Duration) (bool, int64, error) {
	if err := checkSlot(key, holder, n, ttl); err != nil {
		return false, 0, err
	}
	var res []int64
	err := s.bounded(ctx, "acquire slot", func() error {
		var err error
		res, err = acquireSlotScript.Run(ctx, s.c, []string{s.slotsKey(key)},
			holder, n, min(max(limit, 0), maxSlots), ttl.Microseconds()).Int64Slice()
		return err
	})
	if err != nil {
		return false, 0, fmt.Errorf("sluiceredis: acquire slot: %w", err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("sluiceredis: acquire slot: answer %v", res)
	}
	return res[0] == 1, res[1], nil
}

// ReleaseSlot removes holder's n slots of budget key; the slots of other
// holders are untouched, so releasing a lease that expired (and whose slot
// another holder took) frees nothing.
func (s *Store) ReleaseSlot(ctx context.Context, key, holder string, n int64) error {
	if err := checkSlot(key, holder, n, time.Millisecond); err != nil {
		return err
	}
	return s.bounded(ctx, "release slot", func() error {
		if err := releaseSlotScript.Run(ctx, s.c, []string{s.slotsKey(key)}, holder, n).Err(); err != nil {
			return fmt.Errorf("sluiceredis: release slot: %w", err)
		}
		return nil
	})
}

// RenewSlots sets the leases of holders[i]'s ns[i] slots of budget keys[i]
// to ttl from the server's clock: one script call per budget, all in one
// pipeline (one round trip on a single server). Without add it renews
// only live slots and returns how many were missing or expired (lost
// leases); with add it adds those back too.
func (s *Store) RenewSlots(ctx context.Context, keys, holders []string, ns []int64, ttl time.Duration, add bool) (int64, error) {
	if len(holders) != len(keys) || len(ns) != len(keys) {
		return 0, errors.New("sluiceredis: renew slots: keys, holders and counts differ in length")
	}
	args := make(map[string][]any)
	var order []string
	for i, k := range keys {
		if err := checkSlot(k, holders[i], ns[i], ttl); err != nil {
			return 0, err
		}
		if _, ok := args[k]; !ok {
			order = append(order, k)
			flag := "0"
			if add {
				flag = "1"
			}
			args[k] = []any{ttl.Microseconds(), flag}
		}
		args[k] = append(args[k], holders[i], ns[i])
	}
	var missing int64
	err := s.bounded(ctx, "renew slots", func() error {
		var err error
		missing, err = s.renew(ctx, order, args)
		return err
	})
	return missing, err
}

// renew runs renewSlotsScript for every key of order in one pipeline,
// again with the source for those refused NOSCRIPT.
func (s *Store) renew(ctx context.Context, order []string, args map[string][]any) (int64, error) {
	run := func(idx []int, eval bool) []*redis.Cmd {
		pipe := s.c.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			k := []string{s.slotsKey(order[i])}
			if eval {
				cmds[j] = renewSlotsScript.Eval(ctx, pipe, k, args[order[i]]...)
			} else {
				cmds[j] = renewSlotsScript.EvalSha(ctx, pipe, k, args[order[i]]...)
			}
		}
		_, _ = pipe.Exec(ctx)
		return cmds
	}
	all := make([]int, len(order))
	for i := range all {
		all[i] = i
	}
	cmds := run(all, false)
	var redo []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			redo = append(redo, i)
		}
	}
	if len(redo) > 0 {
		for j, c := range run(redo, true) {
			cmds[redo[j]] = c
		}
	}
	var missing int64
	for _, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return 0, fmt.Errorf("sluiceredis: renew slots: %w", err)
		}
		missing += n
	}
	return missing, nil
}

// SlotsInUse returns the live slots (leases not expired, on the server's
// clock) of fleet-wide concurrency budget key: what a dashboard or a test
// samples.
func (s *Store) SlotsInUse(ctx context.Context, key string) (int64, error) {
	n, err := countSlotsScript.Run(ctx, s.c, []string{s.slotsKey(key)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("sluiceredis: slots in use: %w", err)
	}
	return n, nil
}
