package simnode

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
)

// The fast commands answer as miniredis's own do: the same random
// commands go to two databases, one through fast, the other through
// miniredis's dispatcher, with time passing between them; every reply and
// every key's TTL must agree.
func TestFast_answersAsMiniredisDoes(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := miniredis.NewMiniRedis(), miniredis.NewMiniRedis()
	for _, m := range []*miniredis.Miniredis{a, b} {
		m.ClockTTL(true)
		m.SetTime(now)
		c, err := m.Dial() // starts the server without a listener
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		defer m.Close()
	}
	l := lua.NewState()
	defer l.Close()
	keys := []string{"s", "t", "h", "z", "none"}
	pick := func() string { return keys[rng.Intn(len(keys))] }
	num := func() string {
		return []string{"0", "-5", "1", "250", "1000", "30000", "x", "1.5"}[rng.Intn(8)]
	}
	dispatch := func(m *miniredis.Miniredis, args []string) any {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		m.Server().Dispatch(server.NewPeer(w), args)
		_ = w.Flush()
		v, err := server.ParseReply(bufio.NewReader(&buf))
		if err != nil {
			return "error: " + err.Error()
		}
		return v
	}
	covered := map[string]int{}
	for i := range 20000 {
		if rng.Intn(10) == 0 {
			now = now.Add(time.Duration(rng.Intn(400)) * time.Millisecond)
			a.SetTime(now)
			b.SetTime(now)
		}
		var args []string
		switch rng.Intn(10) {
		case 0:
			args = []string{"GET", pick()}
		case 1, 2:
			args = []string{"SET", pick(), fmt.Sprint(rng.Intn(9))}
			for _, o := range rng.Perm(5)[:rng.Intn(4)] {
				switch o {
				case 0:
					args = append(args, "NX")
				case 1:
					args = append(args, "XX")
				case 2:
					args = append(args, "PX", num())
				case 3:
					args = append(args, "ex", num())
				case 4:
					args = append(args, "KEEPTTL")
				}
			}
		case 3:
			args = []string{"PTTL", pick()}
		case 4:
			args = []string{"PEXPIRE", pick(), num()}
		case 5:
			args = []string{"DEL", pick(), pick()}
		case 6:
			args = []string{"EXISTS", pick(), pick(), pick()}
		case 7:
			args = []string{"HGET", pick(), []string{"f", "g", ""}[rng.Intn(3)]}
		case 8:
			// Keys of other types, through miniredis on both.
			if rng.Intn(2) == 0 {
				args = []string{"HSET", pick(), "f", fmt.Sprint(rng.Intn(3)), "", "e"}
			} else {
				args = []string{"ZADD", pick(), "1", "m"}
			}
			dispatch(a, args)
			dispatch(b, args)
			continue
		case 9:
			args = []string{"TIME"}
		}
		want := dispatch(b, args)
		db := a.DB(0)
		v, msg, ok := fast(l, db, now, args)
		if !ok {
			covered["fallback "+args[0]]++
			dispatch(a, args)
			continue
		}
		covered[args[0]]++
		var got any
		if msg != "" {
			got = "error: " + msg
		} else {
			got = fromLua(v)
		}
		if fmt.Sprint(normal(want)) != fmt.Sprint(got) {
			t.Fatalf("step %d, %q: fast answered %v, miniredis %v (seed %d)", i, args, got, normal(want), seed)
		}
		for _, k := range keys {
			if a.Exists(k) != b.Exists(k) || a.TTL(k) != b.TTL(k) || a.Exists(k) && a.Type(k) != b.Type(k) {
				t.Fatalf("step %d, %q: key %s differs: exists %v/%v ttl %v/%v (seed %d)", i, args, k, a.Exists(k), b.Exists(k), a.TTL(k), b.TTL(k), seed)
			}
		}
	}
	for _, c := range []string{"GET", "SET", "PTTL", "PEXPIRE", "DEL", "EXISTS", "HGET", "TIME"} {
		if covered[c] == 0 {
			t.Errorf("%s never answered by fast: %v", c, covered)
		}
	}
}

// normal is a reply as fromLua gives it.
func normal(v any) any {
	switch v := v.(type) {
	case error:
		return "error: " + v.Error()
	case server.Simple:
		return "status: " + string(v)
	case int:
		return int64(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normal(e)
		}
		return out
	}
	return v
}

// fromLua is a script value as a reply.
func fromLua(v lua.LValue) any {
	switch v := v.(type) {
	case lua.LNumber:
		return int64(v)
	case lua.LString:
		return string(v)
	case lua.LBool:
		if !v {
			return nil
		}
	case *lua.LTable:
		if ok := v.RawGetString("ok"); ok != lua.LNil {
			return "status: " + ok.String()
		}
		var out []any
		for i := 1; v.RawGetInt(i) != lua.LNil; i++ {
			out = append(out, fromLua(v.RawGetInt(i)))
		}
		return out
	}
	return strings.TrimSpace(fmt.Sprint(v))
}
