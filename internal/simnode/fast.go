package simnode

import (
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	lua "github.com/yuin/gopher-lua"
)

// fast runs the commands that the library's scripts call most (GET, SET,
// PTTL, PEXPIRE, DEL, EXISTS, HGET, TIME) on the miniredis database
// directly, without encoding a command and decoding its reply: that round
// trip through miniredis's dispatcher cost more than the commands. It
// answers as miniredis's own commands do (fast_test.go compares the two),
// and returns handled false for any form it does not cover (other options,
// bad arguments, a SET over another type), which then goes to miniredis.
// db is the database of this script call, its TTLs already brought to the
// node's time; now is the node's time.
func fast(l *lua.LState, db *miniredis.RedisDB, now time.Time, args []string) (v lua.LValue, errMsg string, handled bool) {
	switch args[0] {
	case "GET":
		if len(args) != 2 {
			return nil, "", false
		}
		s, err := db.Get(args[1])
		switch err {
		case nil:
			return lua.LString(s), "", true
		case miniredis.ErrKeyNotFound:
			return lua.LFalse, "", true
		}
		return nil, wrongType, true
	case "SET":
		return fastSet(l, db, args)
	case "PTTL":
		if len(args) != 2 {
			return nil, "", false
		}
		if !db.Exists(args[1]) {
			return lua.LNumber(-2), "", true
		}
		ttl := db.TTL(args[1])
		if ttl == 0 {
			return lua.LNumber(-1), "", true
		}
		return lua.LNumber(ttl.Nanoseconds() / 1e6), "", true
	case "PEXPIRE":
		if len(args) != 3 {
			return nil, "", false
		}
		ms, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil || ms > 1<<40 {
			return nil, "", false
		}
		if !db.Exists(args[1]) {
			return lua.LNumber(0), "", true
		}
		if ms <= 0 {
			db.Del(args[1])
		} else {
			db.SetTTL(args[1], time.Duration(ms)*time.Millisecond)
		}
		return lua.LNumber(1), "", true
	case "DEL", "EXISTS":
		if len(args) < 2 {
			return nil, "", false
		}
		k := 0
		for _, key := range args[1:] {
			if args[0] == "DEL" && db.Del(key) || args[0] == "EXISTS" && db.Exists(key) {
				k++
			}
		}
		return lua.LNumber(k), "", true
	case "HGET":
		if len(args) != 3 {
			return nil, "", false
		}
		switch db.Type(args[1]) {
		case "":
			return lua.LFalse, "", true
		case "hash":
		default:
			return nil, wrongType, true
		}
		fields, _ := db.HKeys(args[1])
		for _, f := range fields {
			if f == args[2] {
				return lua.LString(db.HGet(args[1], args[2])), "", true
			}
		}
		return lua.LFalse, "", true
	case "TIME":
		if len(args) != 1 {
			return nil, "", false
		}
		nanos := now.UnixNano()
		t := l.CreateTable(2, 0)
		t.RawSetInt(1, lua.LString(strconv.FormatInt(nanos/1e9, 10)))
		t.RawSetInt(2, lua.LString(strconv.FormatInt(nanos/1e3%1e6, 10)))
		return t, "", true
	}
	return nil, "", false
}

// wrongType is Redis's error for a command on a key of another type.
const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// fastSet is SET key value [NX|XX] [PX ms|EX s].
func fastSet(l *lua.LState, db *miniredis.RedisDB, args []string) (lua.LValue, string, bool) {
	if len(args) < 3 {
		return nil, "", false
	}
	key, value := args[1], args[2]
	var nx, xx bool
	var ttl time.Duration
	for i := 3; i < len(args); i++ {
		switch strings.ToUpper(args[i]) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "PX", "EX":
			if ttl != 0 || i+1 == len(args) {
				return nil, "", false
			}
			n, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil || n <= 0 || n > 1<<40 {
				return nil, "", false
			}
			unit := time.Millisecond
			if strings.EqualFold(args[i], "EX") {
				unit = time.Second
			}
			ttl = time.Duration(n) * unit
			i++
		default:
			return nil, "", false
		}
	}
	if nx && xx {
		return nil, "", false
	}
	switch t := db.Type(key); {
	case t == "" && xx, t != "" && nx:
		return lua.LFalse, "", true
	case t != "" && t != "string":
		return nil, "", false // SET replaces a key of another type: miniredis's SET does
	}
	if err := db.Set(key, value); err != nil {
		return nil, "", false
	}
	if ttl > 0 {
		db.SetTTL(key, ttl)
	}
	t := l.CreateTable(0, 1)
	t.RawSetString("ok", lua.LString("OK"))
	return t, "", true
}
