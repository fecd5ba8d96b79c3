package simnode

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// store is one incarnation's data: the strings, hashes and sorted sets the
// library (and a test's own inspection) uses, each with when it expires on
// the node's clock. A key whose time has come is gone the moment a command
// looks at it, as in Redis, where an expired key is never seen; nothing
// runs in between, so passing time costs nothing.
type store struct {
	items map[string]*item
	now   time.Time // the node's time of the command running
}

type item struct {
	kind byte // kString, kHash or kZset
	str  string
	hash map[string]string
	zset map[string]float64
	exp  time.Time // zero: never
}

const (
	kString = 's'
	kHash   = 'h'
	kZset   = 'z'
)

// The replies of commands, as Go values: nil (a null bulk string), int64,
// string (a bulk string), status, errorReply and []any.
type (
	status     string
	errorReply string
)

const (
	errWrongType = errorReply("WRONGTYPE Operation against a key holding the wrong kind of value")
	errSyntax    = errorReply("ERR syntax error")
	errNotInt    = errorReply("ERR value is not an integer or out of range")
	errNotFloat  = errorReply("ERR value is not a valid float")
	errMinMax    = errorReply("ERR min or max is not a float")
	ok           = status("OK")
)

func newStore() *store { return &store{items: map[string]*item{}} }

// get returns the live item of k, nil when there is none.
func (s *store) get(k string) *item {
	it := s.items[k]
	if it != nil && !it.exp.IsZero() && !s.now.Before(it.exp) {
		delete(s.items, k)
		return nil
	}
	return it
}

// typed returns k's item when it is of kind, nil when there is none, and
// errWrongType when it is of another kind.
func (s *store) typed(k string, kind byte) (*item, any) {
	it := s.get(k)
	if it != nil && it.kind != kind {
		return nil, errWrongType
	}
	return it, nil
}

// keys returns the live keys, sorted.
func (s *store) keys() []string {
	out := make([]string, 0, len(s.items))
	for k := range s.items {
		if s.get(k) != nil {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// command is one data command: its arity as Redis counts it (with the
// command's name; negative: at least that many) and what runs it.
type command struct {
	arity int
	run   func(s *store, a []string) any
}

// commands are the data commands the store runs. The engine adds the
// server, connection, transaction, publish/subscribe and scripting ones.
var commands map[string]command

func init() {
	commands = map[string]command{
		"GET": {2, func(s *store, a []string) any {
			it, err := s.typed(a[1], kString)
			if err != nil || it == nil {
				return err
			}
			return it.str
		}},
		"SET":    {-3, cmdSet},
		"DEL":    {-2, cmdDel},
		"UNLINK": {-2, cmdDel},
		"EXISTS": {-2, func(s *store, a []string) any {
			var n int64
			for _, k := range a[1:] {
				if s.get(k) != nil {
					n++
				}
			}
			return n
		}},
		"TYPE": {2, func(s *store, a []string) any {
			it := s.get(a[1])
			if it == nil {
				return status("none")
			}
			return status(map[byte]string{kString: "string", kHash: "hash", kZset: "zset"}[it.kind])
		}},
		"PTTL":    {2, func(s *store, a []string) any { return ttl(s, a[1], time.Millisecond) }},
		"TTL":     {2, func(s *store, a []string) any { return ttl(s, a[1], time.Second) }},
		"PEXPIRE": {-3, func(s *store, a []string) any { return expire(s, a, time.Millisecond) }},
		"EXPIRE":  {-3, func(s *store, a []string) any { return expire(s, a, time.Second) }},
		"PERSIST": {2, func(s *store, a []string) any {
			it := s.get(a[1])
			if it == nil || it.exp.IsZero() {
				return int64(0)
			}
			it.exp = time.Time{}
			return int64(1)
		}},
		"INCR":   {2, func(s *store, a []string) any { return incr(s, a[1], 1) }},
		"DECR":   {2, func(s *store, a []string) any { return incr(s, a[1], -1) }},
		"INCRBY": {3, func(s *store, a []string) any { return incrBy(s, a[1], a[2], 1) }},
		"DECRBY": {3, func(s *store, a []string) any { return incrBy(s, a[1], a[2], -1) }},
		"MGET": {-2, func(s *store, a []string) any {
			out := make([]any, len(a)-1)
			for i, k := range a[1:] {
				if it := s.get(k); it != nil && it.kind == kString {
					out[i] = it.str
				}
			}
			return out
		}},
		"KEYS": {2, func(s *store, a []string) any {
			out := []any{}
			for _, k := range s.keys() {
				if glob(a[1], k) {
					out = append(out, k)
				}
			}
			return out
		}},
		"DBSIZE": {1, func(s *store, a []string) any { return int64(len(s.keys())) }},
		"FLUSHALL": {-1, func(s *store, a []string) any {
			clear(s.items)
			return ok
		}},
		"FLUSHDB": {-1, func(s *store, a []string) any {
			clear(s.items)
			return ok
		}},

		"HSET": {-4, func(s *store, a []string) any {
			if len(a)%2 != 0 {
				return errorReply("ERR wrong number of arguments for 'hset' command")
			}
			it, err := s.typed(a[1], kHash)
			if err != nil {
				return err
			}
			if it == nil {
				it = &item{kind: kHash, hash: map[string]string{}}
				s.items[a[1]] = it
			}
			var added int64
			for i := 2; i < len(a); i += 2 {
				if _, ok := it.hash[a[i]]; !ok {
					added++
				}
				it.hash[a[i]] = a[i+1]
			}
			return added
		}},
		"HGET": {3, func(s *store, a []string) any {
			it, err := s.typed(a[1], kHash)
			if err != nil || it == nil {
				return err
			}
			if v, ok := it.hash[a[2]]; ok {
				return v
			}
			return nil
		}},
		"HMGET": {-3, func(s *store, a []string) any {
			it, err := s.typed(a[1], kHash)
			if err != nil {
				return err
			}
			out := make([]any, len(a)-2)
			for i, f := range a[2:] {
				if v, ok := it.field(f); ok {
					out[i] = v
				}
			}
			return out
		}},
		"HGETALL": {2, func(s *store, a []string) any {
			it, err := s.typed(a[1], kHash)
			if err != nil {
				return err
			}
			out := []any{}
			if it != nil {
				fields := make([]string, 0, len(it.hash))
				for f := range it.hash {
					fields = append(fields, f)
				}
				slices.Sort(fields)
				for _, f := range fields {
					out = append(out, f, it.hash[f])
				}
			}
			return out
		}},
		"HDEL": {-3, func(s *store, a []string) any {
			it, err := s.typed(a[1], kHash)
			if err != nil || it == nil {
				return orZero(err)
			}
			return remove(s, a[1], it.hash, a[2:])
		}},
		"HLEN": {2, func(s *store, a []string) any {
			it, err := s.typed(a[1], kHash)
			if err != nil || it == nil {
				return orZero(err)
			}
			return int64(len(it.hash))
		}},
		"HEXISTS": {3, func(s *store, a []string) any {
			it, err := s.typed(a[1], kHash)
			if err != nil || it == nil {
				return orZero(err)
			}
			if _, ok := it.hash[a[2]]; ok {
				return int64(1)
			}
			return int64(0)
		}},

		"ZADD": {-4, cmdZadd},
		"ZREM": {-3, func(s *store, a []string) any {
			it, err := s.typed(a[1], kZset)
			if err != nil || it == nil {
				return orZero(err)
			}
			return remove(s, a[1], it.zset, a[2:])
		}},
		"ZCARD": {2, func(s *store, a []string) any {
			it, err := s.typed(a[1], kZset)
			if err != nil || it == nil {
				return orZero(err)
			}
			return int64(len(it.zset))
		}},
		"ZSCORE": {3, func(s *store, a []string) any {
			it, err := s.typed(a[1], kZset)
			if err != nil || it == nil {
				return err
			}
			if v, ok := it.zset[a[2]]; ok {
				return formatScore(v)
			}
			return nil
		}},
		"ZCOUNT": {4, func(s *store, a []string) any {
			min, max, err := scoreRange(a[2], a[3])
			if err != nil {
				return err
			}
			it, err2 := s.typed(a[1], kZset)
			if err2 != nil || it == nil {
				return orZero(err2)
			}
			var n int64
			for _, v := range it.zset {
				if min.below(v) && max.above(v) {
					n++
				}
			}
			return n
		}},
		"ZRANGE":        {-4, cmdZrange},
		"ZRANGEBYSCORE": {-4, cmdZrangeByScore},
		"ZPOPMIN": {-2, func(s *store, a []string) any {
			count := 1
			if len(a) > 3 {
				return errSyntax
			}
			if len(a) == 3 {
				n, err := strconv.Atoi(a[2])
				if err != nil || n < 0 {
					return errorReply("ERR value is out of range, must be positive")
				}
				count = n
			}
			it, err := s.typed(a[1], kZset)
			if err != nil || it == nil {
				return orEmpty(err)
			}
			out := []any{}
			for _, m := range it.sorted()[:min(count, len(it.zset))] {
				out = append(out, m, formatScore(it.zset[m]))
				delete(it.zset, m)
			}
			if len(it.zset) == 0 {
				delete(s.items, a[1])
			}
			return out
		}},
	}
}

// remove deletes names from m, the fields or members of key's item, and
// the key once m is empty, as Redis drops an empty hash or sorted set; it
// returns how many of the names were there.
func remove[V any](s *store, key string, m map[string]V, names []string) int64 {
	var n int64
	for _, name := range names {
		if _, ok := m[name]; ok {
			delete(m, name)
			n++
		}
	}
	if len(m) == 0 {
		delete(s.items, key)
	}
	return n
}

func orZero(err any) any {
	if err != nil {
		return err
	}
	return int64(0)
}

func orEmpty(err any) any {
	if err != nil {
		return err
	}
	return []any{}
}

// field returns a hash item's field; a nil item has none.
func (it *item) field(f string) (string, bool) {
	if it == nil {
		return "", false
	}
	v, ok := it.hash[f]
	return v, ok
}

// cmdSet is SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
func cmdSet(s *store, a []string) any {
	var nx, xx, get, keep bool
	var exp time.Time
	for i := 3; i < len(a); i++ {
		switch o := strings.ToUpper(a[i]); o {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GET":
			get = true
		case "KEEPTTL":
			keep = true
		case "EX", "PX", "EXAT", "PXAT":
			if !exp.IsZero() || i+1 == len(a) {
				return errSyntax
			}
			i++
			n, err := strconv.ParseInt(a[i], 10, 64)
			if err != nil {
				return errNotInt
			}
			if n <= 0 {
				return errorReply("ERR invalid expire time in 'set' command")
			}
			switch o {
			case "EX":
				exp = s.now.Add(time.Duration(n) * time.Second)
			case "PX":
				exp = s.now.Add(time.Duration(n) * time.Millisecond)
			case "EXAT":
				exp = time.Unix(n, 0)
			case "PXAT":
				exp = time.UnixMilli(n)
			}
		default:
			return errSyntax
		}
	}
	if nx && xx || keep && !exp.IsZero() {
		return errSyntax
	}
	old := s.get(a[1])
	var prev any
	if get && old != nil {
		if old.kind != kString {
			return errWrongType
		}
		prev = old.str
	}
	if nx && old != nil || xx && old == nil {
		if get {
			return prev
		}
		return nil
	}
	if keep && old != nil {
		exp = old.exp
	}
	s.items[a[1]] = &item{kind: kString, str: a[2], exp: exp}
	if !exp.IsZero() && !s.now.Before(exp) {
		delete(s.items, a[1])
	}
	if get {
		return prev
	}
	return ok
}

func cmdDel(s *store, a []string) any {
	var n int64
	for _, k := range a[1:] {
		if s.get(k) != nil {
			delete(s.items, k)
			n++
		}
	}
	return n
}

// ttl is PTTL or TTL: -2 for no key, -1 for no expiry.
func ttl(s *store, k string, unit time.Duration) any {
	it := s.get(k)
	switch {
	case it == nil:
		return int64(-2)
	case it.exp.IsZero():
		return int64(-1)
	}
	left := it.exp.Sub(s.now)
	if unit == time.Second {
		return int64((left + time.Second/2) / time.Second)
	}
	return int64(left / time.Millisecond)
}

// expire is PEXPIRE or EXPIRE key n [NX|XX|GT|LT].
func expire(s *store, a []string, unit time.Duration) any {
	if len(a) > 4 {
		return errSyntax
	}
	n, err := strconv.ParseInt(a[2], 10, 64)
	if err != nil {
		return errNotInt
	}
	it := s.get(a[1])
	if it == nil {
		return int64(0)
	}
	exp := s.now.Add(time.Duration(n) * unit)
	if len(a) == 4 {
		has := !it.exp.IsZero()
		switch strings.ToUpper(a[3]) {
		case "NX":
			if has {
				return int64(0)
			}
		case "XX":
			if !has {
				return int64(0)
			}
		case "GT":
			if !has || !exp.After(it.exp) {
				return int64(0)
			}
		case "LT":
			if has && !exp.Before(it.exp) {
				return int64(0)
			}
		default:
			return errorReply("ERR Unsupported option " + a[3])
		}
	}
	if n <= 0 {
		delete(s.items, a[1])
		return int64(1)
	}
	it.exp = exp
	return int64(1)
}

func incr(s *store, k string, by int64) any {
	it, err := s.typed(k, kString)
	if err != nil {
		return err
	}
	var v int64
	if it != nil {
		n, err := strconv.ParseInt(it.str, 10, 64)
		if err != nil {
			return errNotInt
		}
		v = n
	} else {
		it = &item{kind: kString}
		s.items[k] = it
	}
	v += by
	it.str = strconv.FormatInt(v, 10)
	return v
}

func incrBy(s *store, k, by string, sign int64) any {
	n, err := strconv.ParseInt(by, 10, 64)
	if err != nil {
		return errNotInt
	}
	return incr(s, k, sign*n)
}

// cmdZadd is ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...].
func cmdZadd(s *store, a []string) any {
	var nx, xx, gt, lt, ch, inc bool
	i := 2
	for ; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "NX":
			nx = true
			continue
		case "XX":
			xx = true
			continue
		case "GT":
			gt = true
			continue
		case "LT":
			lt = true
			continue
		case "CH":
			ch = true
			continue
		case "INCR":
			inc = true
			continue
		}
		break
	}
	pairs := a[i:]
	switch {
	case len(pairs) == 0 || len(pairs)%2 != 0:
		return errSyntax
	case inc && len(pairs) != 2:
		return errorReply("ERR INCR option supports a single increment-element pair")
	case nx && xx:
		return errorReply("ERR XX and NX options at the same time are not compatible")
	case gt && lt || nx && (gt || lt):
		return errorReply("ERR GT, LT, and/or NX options at the same time are not compatible")
	}
	scores := make([]float64, len(pairs)/2)
	for k := range scores {
		f, err := parseScore(pairs[2*k])
		if err != nil {
			return errNotFloat
		}
		scores[k] = f
	}
	it, err := s.typed(a[1], kZset)
	if err != nil {
		return err
	}
	if inc {
		// As ZINCRBY: the member's new score, or nil when an option
		// skipped it.
		var old float64
		has := false
		if it != nil {
			old, has = it.zset[pairs[1]]
		}
		f := old + scores[0]
		if math.IsNaN(f) {
			return errorReply("ERR resulting score is not a number (NaN)")
		}
		if has && (nx || gt && f <= old || lt && f >= old) || !has && xx {
			return nil
		}
		if it == nil {
			it = &item{kind: kZset, zset: map[string]float64{}}
			s.items[a[1]] = it
		}
		it.zset[pairs[1]] = f
		return formatScore(f)
	}
	if it == nil {
		if xx {
			return int64(0)
		}
		it = &item{kind: kZset, zset: map[string]float64{}}
		s.items[a[1]] = it
	}
	var added, changed int64
	for k, f := range scores {
		m := pairs[2*k+1]
		old, has := it.zset[m]
		switch {
		case has && nx, !has && xx, has && gt && f <= old, has && lt && f >= old:
			continue
		case !has:
			added++
		case old != f:
			changed++
		}
		it.zset[m] = f
	}
	if len(it.zset) == 0 {
		delete(s.items, a[1])
	}
	if ch {
		return added + changed
	}
	return added
}

// sorted returns a sorted set's members by score, then member.
func (it *item) sorted() []string {
	ms := make([]string, 0, len(it.zset))
	for m := range it.zset {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(x, y string) int {
		if a, b := it.zset[x], it.zset[y]; a != b {
			if a < b {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return ms
}

// cmdZrange is ZRANGE key start stop [WITHSCORES] (by rank only).
func cmdZrange(s *store, a []string) any {
	withScores := false
	if len(a) == 5 && strings.EqualFold(a[4], "WITHSCORES") {
		withScores = true
	} else if len(a) != 4 {
		return errSyntax
	}
	start, err1 := strconv.Atoi(a[2])
	stop, err2 := strconv.Atoi(a[3])
	if err1 != nil || err2 != nil {
		return errNotInt
	}
	it, err := s.typed(a[1], kZset)
	if err != nil || it == nil {
		return orEmpty(err)
	}
	ms := it.sorted()
	n := len(ms)
	if start < 0 {
		start = max(n+start, 0)
	}
	if stop < 0 {
		stop = n + stop
	}
	stop = min(stop, n-1)
	out := []any{}
	for i := start; i <= stop; i++ {
		out = append(out, ms[i])
		if withScores {
			out = append(out, formatScore(it.zset[ms[i]]))
		}
	}
	return out
}

// cmdZrangeByScore is ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count].
func cmdZrangeByScore(s *store, a []string) any {
	min, max, err := scoreRange(a[2], a[3])
	if err != nil {
		return err
	}
	withScores, offset, count := false, 0, -1
	for i := 4; i < len(a); i++ {
		switch {
		case strings.EqualFold(a[i], "WITHSCORES"):
			withScores = true
		case strings.EqualFold(a[i], "LIMIT") && i+2 < len(a):
			o, err1 := strconv.Atoi(a[i+1])
			c, err2 := strconv.Atoi(a[i+2])
			if err1 != nil || err2 != nil {
				return errNotInt
			}
			offset, count = o, c
			i += 2
		default:
			return errSyntax
		}
	}
	it, err2 := s.typed(a[1], kZset)
	if err2 != nil || it == nil {
		return orEmpty(err2)
	}
	out := []any{}
	if offset < 0 {
		return out
	}
	for _, m := range it.sorted() {
		v := it.zset[m]
		if !min.below(v) || !max.above(v) {
			continue
		}
		if offset > 0 {
			offset--
			continue
		}
		if count == 0 {
			break
		}
		count--
		out = append(out, m)
		if withScores {
			out = append(out, formatScore(v))
		}
	}
	return out
}

// bound is one end of a score range: a score, exclusive or not.
type bound struct {
	v    float64
	excl bool
}

// below reports whether v is above the lower bound b.
func (b bound) below(v float64) bool { return v > b.v || !b.excl && v == b.v }

// above reports whether v is below the upper bound b.
func (b bound) above(v float64) bool { return v < b.v || !b.excl && v == b.v }

func scoreRange(lo, hi string) (bound, bound, any) {
	var bs [2]bound
	for i, s := range []string{lo, hi} {
		if strings.HasPrefix(s, "(") {
			bs[i].excl = true
			s = s[1:]
		}
		f, err := parseScore(s)
		if err != nil {
			return bound{}, bound{}, errMinMax
		}
		bs[i].v = f
	}
	return bs[0], bs[1], nil
}

func parseScore(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "inf", "+inf":
		return math.Inf(1), nil
	case "-inf":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && math.IsNaN(f) {
		err = strconv.ErrSyntax
	}
	return f, err
}

// formatScore writes a score as Redis does: integers without a point, the
// shortest form that reads back the same otherwise, without an exponent
// for the magnitudes the scripts use (1700000000125.5, not 1.7000000001255e+12).
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == math.Trunc(f) && math.Abs(f) < 1e17:
		return strconv.FormatInt(int64(f), 10)
	case math.Abs(f) >= 1e-4 && math.Abs(f) < 1e17:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// glob reports whether s matches the pattern p as KEYS matches: * any
// run, ? any byte, [abc], [^a], [a-z] a class, \\x the byte x.
func glob(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if len(p) == 0 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if glob(p, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		case '[':
			if len(s) == 0 {
				return false
			}
			end := strings.IndexByte(p[1:], ']')
			if end < 0 {
				return false
			}
			class, neg := p[1:1+end], false
			if strings.HasPrefix(class, "^") {
				class, neg = class[1:], true
			}
			in := false
			for i := 0; i < len(class); i++ {
				if i+2 < len(class) && class[i+1] == '-' {
					in = in || class[i] <= s[0] && s[0] <= class[i+2]
					i += 2
				} else {
					in = in || class[i] == s[0]
				}
			}
			if in == neg {
				return false
			}
			p = p[end+1:]
		case '\\':
			if len(p) > 1 {
				p = p[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return len(s) == 0
}
