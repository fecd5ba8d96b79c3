package simnode

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// engine is one incarnation of a node's process: it runs every command one
// at a time, as Redis's single thread does, on the incarnation's store
// (store.go), with the server, connection, transaction, publish/subscribe
// and scripting commands around it. Scripts run on one Lua state that it
// keeps between calls, and their redis.call reaches the same commands
// directly, with no encoding in between.
//
// What differs from Redis: scripts run in gopher-lua, and globals a script
// sets survive to the next call (Redis refuses them; the library's scripts
// set none); the commands are the ones the library and a test's
// inspection use (commands), each answering as Redis does; one database.
type engine struct {
	info func(section string) string // an INFO section, lower-case
	// denied reports whether client may not run cmd ("info|replication"),
	// as an ACL refuses it (Node.Deny); nil: every command is allowed.
	denied func(client, cmd string) bool
	// serves reports whether the node serves a slot (cluster mode: a
	// command on a key of another slot is answered MOVED); nil: every slot.
	serves    func(slot uint16) bool
	clustered func() bool      // the node is in cluster mode (SetCluster)
	now       func() time.Time // the node's time

	mu sync.Mutex // one command at a time; everything below is under it
	st *store
	l  *lua.LState
	// KEYS and ARGV: two tables the engine keeps, refilled for every call
	// (the library's scripts never change them).
	keysT, argvT *lua.LTable
	// okTable is every OK status a script sees: one table, as the
	// library's scripts only read it.
	okTable *lua.LTable
	sources map[string]string // sha → source: the script cache
	subs    map[string]map[*conn]bool
	conns   int64 // connections so far, for CLIENT ID
	caller  *conn // the connection whose script runs now
	spinAt  time.Time
	spinN   int
	spinLog []string
}

// conn is one connection's state on the node.
type conn struct {
	id     int64
	client string // the client that dialled it (Node.Dial)
	name   string
	subs   map[string]bool
	multi  [][]string // queued commands while in MULTI
	in     bool       // in MULTI
	dirty  bool       // a command queued in MULTI was refused
	quit   bool

	wmu sync.Mutex // w: replies, and messages from other connections' PUBLISH
	w   *bufio.Writer
}

func newEngine(info func(section string) string, now func() time.Time, st *store) *engine {
	e := &engine{info: info, now: now, st: st, sources: map[string]string{}, subs: map[string]map[*conn]bool{}}
	e.l = lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		e.l.Push(e.l.NewFunction(lib.open))
		e.l.Push(lua.LString(lib.name))
		e.l.Call(1, 0)
	}
	r := e.l.NewTable()
	e.l.SetFuncs(r, map[string]lua.LGFunction{
		"call":         func(l *lua.LState) int { return e.call(l, true) },
		"pcall":        func(l *lua.LState) int { return e.call(l, false) },
		"error_reply":  errorReplyLua,
		"status_reply": statusReplyLua,
		"sha1hex":      func(l *lua.LState) int { l.Push(lua.LString(sha1hex(l.CheckString(1)))); return 1 },
		"log":          func(*lua.LState) int { return 0 },
	})
	e.l.SetGlobal("redis", r)
	e.keysT, e.argvT = e.l.NewTable(), e.l.NewTable()
	e.l.SetGlobal("KEYS", e.keysT)
	e.l.SetGlobal("ARGV", e.argvT)
	e.okTable = e.l.CreateTable(0, 1)
	e.okTable.RawSetString("ok", lua.LString("OK"))
	return e
}

// newConn opens a connection's state; w takes its replies.
func (e *engine) newConn(w *bufio.Writer) *conn {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.conns++
	return &conn{id: e.conns, w: w}
}

// callerOf is the connection a command runs for: c, or, for a script's
// redis.call (c nil), the connection that runs the script.
func (e *engine) callerOf(c *conn) *conn {
	if c == nil {
		return e.caller
	}
	return c
}

// closeConn ends a connection's subscriptions.
func (e *engine) closeConn(c *conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range c.subs {
		e.unsubscribe(c, ch)
	}
}

// run runs one command of connection c at the node's time, and returns
// its reply.
func (e *engine) run(c *conn, args []string) any {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spin(args)
	e.st.now = e.now()
	return e.do(c, args)
}

// many is a command's several replies in a row (SUBSCRIBE's, one per
// channel).
type many []any

// do runs one command for c (nil: a script's redis.call).
func (e *engine) do(c *conn, args []string) any {
	name := strings.ToUpper(args[0])
	if c != nil && len(c.subs) > 0 {
		switch name {
		case "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE", "PING", "QUIT", "RESET":
		default:
			return errorReply(fmt.Sprintf("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", strings.ToLower(name)))
		}
	}
	if c != nil && c.in {
		switch name {
		case "EXEC", "DISCARD", "MULTI", "WATCH", "QUIT":
		default:
			if err := e.check(name, args); err != nil {
				c.dirty = true
				return err
			}
			c.multi = append(c.multi, args)
			return status("QUEUED")
		}
	}
	if c == nil {
		switch name {
		case "EVAL", "EVALSHA", "SCRIPT", "MULTI", "EXEC", "DISCARD", "WATCH", "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE", "QUIT", "CLIENT", "SELECT":
			return errorReply("ERR This Redis command is not allowed from script")
		}
	}
	if err := e.check(name, args); err != nil {
		return err
	}
	if c != nil {
		if err := e.moved(args); err != nil {
			return err
		}
	}
	switch name {
	case "EVAL", "EVALSHA":
		// The script's redis.call runs as c: its permissions are c's.
		defer func(prev *conn) { e.caller = prev }(e.caller)
		e.caller = c
		return e.eval(name, args[1:])
	case "SCRIPT":
		return e.script(args[1:])
	case "PUBLISH":
		return e.publish(args[1], args[2])
	case "SUBSCRIBE":
		var out many
		for _, ch := range args[1:] {
			if c.subs == nil {
				c.subs = map[string]bool{}
			}
			if !c.subs[ch] {
				c.subs[ch] = true
				if e.subs[ch] == nil {
					e.subs[ch] = map[*conn]bool{}
				}
				e.subs[ch][c] = true
			}
			out = append(out, []any{"subscribe", ch, int64(len(c.subs))})
		}
		return out
	case "UNSUBSCRIBE":
		chs := args[1:]
		if len(chs) == 0 {
			for ch := range c.subs {
				chs = append(chs, ch)
			}
			if len(chs) == 0 {
				return []any{"unsubscribe", nil, int64(0)}
			}
		}
		var out many
		for _, ch := range chs {
			e.unsubscribe(c, ch)
			out = append(out, []any{"unsubscribe", ch, int64(len(c.subs))})
		}
		return out
	case "PSUBSCRIBE", "PUNSUBSCRIBE":
		return errorReply("ERR simnode: pattern subscriptions are not simulated")
	case "PING":
		if c != nil && len(c.subs) > 0 {
			msg := ""
			if len(args) > 1 {
				msg = args[1]
			}
			return []any{"pong", msg}
		}
		if len(args) > 1 {
			return args[1]
		}
		return status("PONG")
	case "ECHO":
		return args[1]
	case "TIME":
		nanos := e.st.now.UnixNano()
		return []any{strconv.FormatInt(nanos/1e9, 10), strconv.FormatInt(nanos/1e3%1e6, 10)}
	case "INFO":
		if who := e.callerOf(c); len(args) > 1 && who != nil && e.denied != nil && e.denied(who.client, "info|"+strings.ToLower(args[1])) {
			return errorReply("NOPERM User " + who.client + " has no permissions to run the 'info|" + strings.ToLower(args[1]) + "' command")
		}
		if len(args) == 1 || strings.EqualFold(args[1], "all") || strings.EqualFold(args[1], "default") {
			return e.info("server") + "\r\n" + e.info("replication")
		}
		return e.info(strings.ToLower(args[1]))
	case "SELECT":
		if args[1] != "0" {
			return errorReply("ERR simnode: only database 0 is simulated")
		}
		return ok
	case "CLIENT":
		switch strings.ToUpper(args[1]) {
		case "SETNAME":
			if len(args) == 3 {
				c.name = args[2]
				return ok
			}
		case "GETNAME":
			if c.name == "" {
				return nil
			}
			return c.name
		case "ID":
			return c.id
		case "SETINFO":
			return ok
		}
		return errorReply(fmt.Sprintf("ERR unknown subcommand or wrong number of arguments for '%s'. Try CLIENT HELP.", args[1]))
	case "QUIT":
		c.quit = true
		return ok
	case "MULTI":
		if c.in {
			return errorReply("ERR MULTI calls can not be nested")
		}
		c.in, c.dirty, c.multi = true, false, nil
		return ok
	case "DISCARD":
		if !c.in {
			return errorReply("ERR DISCARD without MULTI")
		}
		c.in, c.dirty, c.multi = false, false, nil
		return ok
	case "EXEC":
		if !c.in {
			return errorReply("ERR EXEC without MULTI")
		}
		queued, dirty := c.multi, c.dirty
		c.in, c.dirty, c.multi = false, false, nil
		if dirty {
			return errorReply("EXECABORT Transaction discarded because of previous errors.")
		}
		out := make([]any, len(queued))
		for i, q := range queued {
			out[i] = e.do(c, q)
		}
		return out
	case "WATCH":
		return errorReply("ERR simnode: WATCH is not simulated")
	}
	return commands[name].run(e.st, args)
}

// arities are the engine's own commands' arities, as commands has them.
var arities = map[string]int{
	"EVAL": -3, "EVALSHA": -3, "SCRIPT": -2, "PUBLISH": 3, "SUBSCRIBE": -2, "UNSUBSCRIBE": -1,
	"PSUBSCRIBE": -2, "PUNSUBSCRIBE": -1, "PING": -1, "ECHO": 2, "TIME": 1, "INFO": -1, "SELECT": 2,
	"CLIENT": -2, "QUIT": -1, "MULTI": 1, "DISCARD": 1, "EXEC": 1, "WATCH": -2,
}

// check refuses an unknown command, or one with the wrong number of
// arguments, as Redis does.
func (e *engine) check(name string, args []string) any {
	arity, ok := arities[name]
	if !ok {
		c, known := commands[name]
		if !known {
			var b strings.Builder
			for _, a := range args[1:min(len(args), 21)] {
				fmt.Fprintf(&b, "'%s' ", a)
			}
			return errorReply(fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", args[0], b.String()))
		}
		arity = c.arity
	}
	if arity > 0 && len(args) != arity || arity < 0 && len(args) < -arity {
		return errorReply(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(name)))
	}
	return nil
}

// publish sends msg to every subscriber of ch, in order, and returns how
// many there were.
func (e *engine) publish(ch, msg string) any {
	var n int64
	for c := range e.subs[ch] {
		c.wmu.Lock()
		writeReply(c.w, []any{"message", ch, msg})
		_ = c.w.Flush()
		c.wmu.Unlock()
		n++
	}
	return n
}

func (e *engine) unsubscribe(c *conn, ch string) {
	delete(c.subs, ch)
	if s := e.subs[ch]; s != nil {
		delete(s, c)
		if len(s) == 0 {
			delete(e.subs, ch)
		}
	}
}

// spinLimit is how many commands a node takes at one instant of virtual
// time before it reports a spin: something that sends commands in a loop
// without letting time pass stops a simulation's clock.
const spinLimit = 200000

// spin counts the commands of one instant, and reports a spin once, with
// the last commands and every goroutine's stack, on standard error.
func (e *engine) spin(args []string) {
	now := time.Now()
	if !now.Equal(e.spinAt) {
		e.spinAt, e.spinN, e.spinLog = now, 0, e.spinLog[:0]
		return
	}
	e.spinN++
	if e.spinN > spinLimit-20 && e.spinN <= spinLimit {
		e.spinLog = append(e.spinLog, strings.Join(args[:min(len(args), 5)], " "))
	}
	if e.spinN == spinLimit {
		buf := make([]byte, 32<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "simnode: %d commands at one instant (%v): a loop that lets no time pass; the last:\n  %s\n%s\n",
			spinLimit, now, strings.Join(e.spinLog, "\n  "), buf)
	}
}

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// script answers SCRIPT LOAD, EXISTS and FLUSH.
func (e *engine) script(args []string) any {
	switch strings.ToUpper(args[0]) {
	case "FLUSH":
		clear(e.sources)
		return ok
	case "LOAD":
		if len(args) != 2 {
			return errorReply("ERR wrong number of arguments for 'script|load' command")
		}
		sha := sha1hex(args[1])
		if _, err := compile(sha, args[1]); err != nil {
			return errorReply(err.Error())
		}
		e.sources[sha] = args[1]
		return sha
	case "EXISTS":
		out := make([]any, len(args)-1)
		for i, sha := range args[1:] {
			_, ok := e.sources[lower(sha)]
			out[i] = int64(map[bool]int{true: 1}[ok])
		}
		return out
	}
	return errorReply(fmt.Sprintf("ERR unknown subcommand '%s'", args[0]))
}

// protos holds the scripts compiled so far, by sha, for every node: SCRIPT
// FLUSH and restarts empty a node's script cache (sources), which makes
// EVALSHA fail, but a compiled script is the same everywhere.
var protos sync.Map

// compile returns the compiled script.
func compile(sha, src string) (*lua.FunctionProto, error) {
	if proto, ok := protos.Load(sha); ok {
		return proto.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "<string>")
	if err != nil {
		return nil, fmt.Errorf("ERR Error compiling script (new function): %v", err)
	}
	proto, err := lua.Compile(chunk, "")
	if err != nil {
		return nil, fmt.Errorf("ERR Error compiling script (new function): %v", err)
	}
	protos.Store(sha, proto)
	return proto, nil
}

// eval runs EVAL or EVALSHA (args: the script or its sha, numkeys, keys
// and arguments).
func (e *engine) eval(cmd string, args []string) any {
	sha, src := lower(args[0]), ""
	if cmd == "EVAL" {
		src = args[0]
		sha = sha1hex(src)
	} else {
		var ok bool
		if src, ok = e.sources[sha]; !ok {
			return errorReply("NOSCRIPT No matching script. Please use EVAL.")
		}
	}
	nkeys, err := strconv.Atoi(args[1])
	switch {
	case err != nil:
		return errNotInt
	case nkeys < 0:
		return errorReply("ERR Number of keys can't be negative")
	case nkeys > len(args)-2:
		return errorReply("ERR Number of keys can't be greater than number of args")
	}
	proto, err := compile(sha, src)
	if err != nil {
		return errorReply(err.Error())
	}
	e.sources[sha] = src
	l := e.l
	fill(e.keysT, args[2:2+nkeys])
	fill(e.argvT, args[2+nkeys:])
	l.Push(l.NewFunctionFromProto(proto))
	err = l.PCall(0, 1, nil)
	if err != nil {
		l.SetTop(0)
		return errorReply(fmt.Sprintf("ERR Error running script: %v", err))
	}
	res := l.Get(-1)
	l.SetTop(0)
	return fromLua(res)
}

// fill makes t the array of ss, in place.
func fill(t *lua.LTable, ss []string) {
	for i, s := range ss {
		t.RawSetInt(i+1, lua.LString(s))
	}
	for i := len(ss) + 1; t.RawGetInt(i) != lua.LNil; i++ {
		t.RawSetInt(i, lua.LNil)
	}
}

// lower is s in lower case, without a copy when it is already.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// call is redis.call (raise, true) and redis.pcall.
func (e *engine) call(l *lua.LState, raise bool) int {
	top := l.GetTop()
	if top == 0 {
		l.RaiseError("Please specify at least one argument for this redis lib call")
		return 0
	}
	args := make([]string, top)
	for i := 1; i <= top; i++ {
		switch a := l.Get(i).(type) {
		case lua.LNumber:
			args[i-1] = a.String()
		case lua.LString:
			args[i-1] = string(a)
		default:
			l.RaiseError("Lua redis lib command arguments must be strings or integers")
			return 0
		}
	}
	reply := e.do(nil, args)
	if msg, isErr := reply.(errorReply); isErr {
		if raise {
			l.RaiseError("%s", string(msg))
			return 0
		}
		t := l.CreateTable(0, 1)
		t.RawSetString("err", lua.LString(msg))
		l.Push(t)
		return 1
	}
	l.Push(e.toLua(l, reply))
	return 1
}

// toLua converts a reply as Redis does for a script: integers to numbers,
// bulk strings to strings, a nil reply to false, a status to {ok = ...},
// arrays to tables.
func (e *engine) toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case status:
		if v == ok {
			return e.okTable
		}
		t := l.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(v))
		return t
	case errorReply:
		t := l.CreateTable(0, 1)
		t.RawSetString("err", lua.LString(v))
		return t
	case []any:
		t := l.CreateTable(len(v), 0)
		for i, x := range v {
			t.RawSetInt(i+1, e.toLua(l, x))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}

// fromLua converts a script's result as Redis does: numbers to integers
// (truncated), strings to bulk strings, true to 1, false and nil to a nil
// reply, {err = ...} to an error, {ok = ...} to a status, other tables to
// arrays up to their first nil.
func fromLua(v lua.LValue) any {
	switch v := v.(type) {
	case lua.LNumber:
		return int64(v)
	case lua.LString:
		return string(v)
	case lua.LBool:
		if v {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if s := v.RawGetString("err"); s.Type() != lua.LTNil {
			return errorReply(s.String())
		}
		if s := v.RawGetString("ok"); s.Type() != lua.LTNil {
			return status(s.String())
		}
		out := []any{}
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			out = append(out, fromLua(e))
		}
		return out
	}
	return nil
}

// errorReplyLua is redis.error_reply: {err = msg}, "ERR " first when msg
// has no error code of its own.
func errorReplyLua(l *lua.LState) int {
	msg := strings.TrimPrefix(l.CheckString(1), "-")
	if code, _, ok := strings.Cut(msg, " "); !ok || code == "" {
		msg = "ERR " + msg
	}
	t := l.NewTable()
	t.RawSetString("err", lua.LString(msg))
	l.Push(t)
	return 1
}

// statusReplyLua is redis.status_reply: {ok = msg}.
func statusReplyLua(l *lua.LState) int {
	t := l.NewTable()
	t.RawSetString("ok", lua.LString(l.CheckString(1)))
	l.Push(t)
	return 1
}

// writeReply writes v in RESP2.
func writeReply(w *bufio.Writer, v any) {
	switch v := v.(type) {
	case nil:
		_, _ = w.WriteString("$-1\r\n")
	case int64:
		_ = w.WriteByte(':')
		_, _ = w.WriteString(strconv.FormatInt(v, 10))
		_, _ = w.WriteString("\r\n")
	case string:
		_ = w.WriteByte('$')
		_, _ = w.WriteString(strconv.Itoa(len(v)))
		_, _ = w.WriteString("\r\n")
		_, _ = w.WriteString(v)
		_, _ = w.WriteString("\r\n")
	case status:
		_ = w.WriteByte('+')
		_, _ = w.WriteString(string(v))
		_, _ = w.WriteString("\r\n")
	case errorReply:
		_ = w.WriteByte('-')
		_, _ = w.WriteString(strings.NewReplacer("\r", " ", "\n", " ").Replace(string(v)))
		_, _ = w.WriteString("\r\n")
	case []any:
		_ = w.WriteByte('*')
		_, _ = w.WriteString(strconv.Itoa(len(v)))
		_, _ = w.WriteString("\r\n")
		for _, e := range v {
			writeReply(w, e)
		}
	case many:
		for _, e := range v {
			writeReply(w, e)
		}
	default:
		writeReply(w, errorReply(fmt.Sprintf("ERR simnode: a reply of type %T", v)))
	}
}
