package simnode

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// The store answers as miniredis does (itself checked against Redis by
// its authors): the same random commands go to both, with time passing
// between them, and every reply and every key's type and TTL must agree.
// The commands are the data commands the library's scripts and the queue
// use, in the forms they use and some they do not.
func TestStore_answersAsMiniredisDoes(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	m.SetTime(now)
	c, err := m.Dial() // starts the server without a listener
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	defer m.Close()
	e := newEngine(func(string) string { return "" }, func() time.Time { return now }, newStore())
	cn := e.newConn(bufio.NewWriter(io.Discard))

	keys := []string{"s", "t", "h", "z", "none"}
	pick := func() string { return keys[rng.Intn(len(keys))] }
	num := func() string {
		return []string{"0", "-5", "1", "250", "1000", "30000", "x", "1.5"}[rng.Intn(8)]
	}
	score := func() string {
		return []string{"0", "1", "2.5", "-3", "1700000000123", "inf", "-inf", "(1", "(2.5", "x"}[rng.Intn(10)]
	}
	member := func() string { return []string{"a", "b", "c", "d"}[rng.Intn(4)] }
	dispatch := func(args []string) any {
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
	for i := range 30000 {
		if rng.Intn(8) == 0 {
			now = now.Add(time.Duration(rng.Intn(400)) * time.Millisecond)
			m.SetTime(now)
		}
		var args []string
		switch rng.Intn(19) {
		case 0:
			args = []string{"GET", pick()}
		case 1, 2:
			args = []string{"SET", pick(), fmt.Sprint(rng.Intn(9))}
			// One of NX and XX, one of PX, EX and KEEPTTL (miniredis
			// takes both of a pair, Redis refuses them).
			switch rng.Intn(3) {
			case 1:
				args = append(args, "NX")
			case 2:
				args = append(args, "XX")
			}
			switch rng.Intn(4) {
			case 1:
				args = append(args, "PX", num())
			case 2:
				args = append(args, "ex", num())
			case 3:
				args = append(args, "KEEPTTL")
			}
		case 3:
			args = []string{[]string{"PTTL", "TYPE"}[rng.Intn(2)], pick()} // TTL: Redis rounds, miniredis truncates
		case 4:
			args = []string{"PEXPIRE", pick(), num()}
			if rng.Intn(3) == 0 {
				args = append(args, []string{"NX", "XX", "GT"}[rng.Intn(3)]) // LT: miniredis sets an equal expiry, Redis does not
			}
		case 5:
			args = []string{"DEL", pick(), pick()}
		case 6:
			args = []string{"EXISTS", pick(), pick(), pick()}
		case 7:
			args = []string{"HGET", pick(), []string{"f", "g", ""}[rng.Intn(3)]}
		case 8:
			args = []string{"HSET", pick(), "f", fmt.Sprint(rng.Intn(3))}
			if rng.Intn(2) == 0 {
				args = append(args, "g", "")
			}
		case 9:
			args = []string{"HMGET", pick(), "f", "g", "x"}
		case 10:
			args = []string{"HGETALL", pick()}
		case 11:
			args = []string{"HDEL", pick(), "f"}
		case 12:
			args = []string{"ZADD", pick()}
			for _, o := range rng.Perm(3)[:rng.Intn(2)] {
				args = append(args, []string{"NX", "XX", "CH"}[o])
			}
			ms := rng.Perm(4)[:1+rng.Intn(2)] // distinct members
			if rng.Intn(3) == 0 {
				// One member, by a finite amount (inf - inf: Redis refuses
				// the NaN, miniredis answers it).
				args = append(args, "INCR", []string{"0", "1", "2.5", "-3", "1700000000123"}[rng.Intn(5)], member())
				break
			}
			for _, k := range ms {
				args = append(args, score(), []string{"a", "b", "c", "d"}[k])
			}
		case 13:
			args = []string{"ZREM", pick(), member(), member()}
		case 14:
			args = []string{"ZCARD", pick()}
		case 15:
			args = []string{"ZCOUNT", pick(), score(), score()}
		case 16:
			args = []string{"ZRANGE", pick(), fmt.Sprint(rng.Intn(5) - 2), fmt.Sprint(rng.Intn(5) - 2)}
			if rng.Intn(2) == 0 {
				args = append(args, "WITHSCORES")
			}
		case 17:
			args = []string{"ZRANGEBYSCORE", pick(), score(), score()}
			if rng.Intn(2) == 0 {
				args = append(args, "LIMIT", fmt.Sprint(rng.Intn(3)), fmt.Sprint(rng.Intn(4)-1))
			}
		case 18:
			args = []string{"ZPOPMIN", pick()}
		}
		want := dispatch(args)
		got, gotErr := plain(e.run(cn, args))
		if gotErr != nil {
			got = "error: " + gotErr.Error()
		}
		covered[args[0]]++
		if w, ok := want.(string); ok && strings.HasPrefix(w, "error: ") {
			// Error codes agree; some texts are miniredis's, others Redis 7's.
			if g, ok := got.(string); ok && strings.HasPrefix(g, "error: ") && strings.Fields(g)[1] == strings.Fields(w)[1] {
				continue
			}
		}
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("step %d, %q: the store answered %v, miniredis %v (seed %d)", i, args, got, want, seed)
		}
		e.st.now = now
		for _, k := range keys {
			it := e.st.get(k)
			var ttl time.Duration
			if it != nil && !it.exp.IsZero() {
				ttl = it.exp.Sub(now)
			}
			if (it != nil) != m.Exists(k) || ttl != m.TTL(k) {
				t.Fatalf("step %d, %q: key %s differs: the store has %v (ttl %v), miniredis %v (ttl %v) (seed %d)", i, args, k, it != nil, ttl, m.Exists(k), m.TTL(k), seed)
			}
		}
	}
	t.Logf("commands: %v", covered)
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "a/b:c", true}, {"k*", "k1", true}, {"k*", "x1", false},
		{"?", "a", true}, {"?", "", false}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"[ab]x", "bx", true}, {"[ab]x", "cx", false}, {"[^ab]x", "cx", true}, {"[a-c]", "b", true},
		{"[a-c]", "d", false}, {`\*`, "*", true}, {`\*`, "a", false}, {"*:{k1}*", "x:{k1}fence", true},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false},
	} {
		if got := glob(c.p, c.s); got != c.want {
			t.Errorf("glob(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}
