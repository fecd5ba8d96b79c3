package simnode

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// engine runs the commands of one incarnation one at a time, as Redis's
// single thread does, and runs scripts itself on one Lua state that it
// keeps between calls: miniredis builds a new Lua state for every script
// call, which cost most of the simulator's CPU. Every other command goes
// to miniredis unchanged. The scripts' redis.call reaches miniredis's
// commands too, so a script sees exactly what the commands do.
//
// What differs from miniredis's own scripting: globals a script sets
// survive to the next call (Redis refuses them; the library's scripts
// set none), and EVAL inside MULTI is refused (the library sends none).
type engine struct {
	m       *miniredis.Miniredis
	srv     *server.Server
	now     func() time.Time            // the node's time
	mu      sync.Mutex                  // one command at a time
	passing atomic.Pointer[server.Peer] // the peer whose command the engine passes to miniredis
	multi   sync.Map                    // *server.Peer → struct{}: inside MULTI

	// Under mu:
	spinAt  time.Time // the instant of the last command, and how many came at it
	spinN   int
	spinLog []string
	l       *lua.LState
	sources map[string]string // sha → source: the script cache
	out     bytes.Buffer      // a nested command's reply
	outW    *bufio.Writer
	outR    *bufio.Reader
	db      *miniredis.RedisDB // the database of the script running; nil between scripts
}

func newEngine(m *miniredis.Miniredis, now func() time.Time) *engine {
	e := &engine{m: m, srv: m.Server(), now: now, sources: map[string]string{}}
	e.outW, e.outR = bufio.NewWriter(&e.out), bufio.NewReader(&e.out)
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
		"error_reply":  errorReply,
		"status_reply": statusReply,
		"sha1hex":      func(l *lua.LState) int { l.Push(lua.LString(sha1hex(l.CheckString(1)))); return 1 },
		"log":          func(*lua.LState) int { return 0 },
	})
	e.l.SetGlobal("redis", r)
	return e
}

// hook is the server's pre-command hook: it runs every command under the
// engine's lock, scripts itself, the rest through miniredis.
func (e *engine) hook(p *server.Peer, cmd string, args []string) bool {
	if e.passing.Load() == p {
		return false // the engine's own call: miniredis runs it
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spin(cmd, args)
	_, inMulti := e.multi.Load(p)
	switch cmd {
	case "EVALSHA", "EVAL":
		if inMulti {
			p.WriteError("ERR simnode: EVAL and EVALSHA inside MULTI are not simulated")
			return true
		}
		e.eval(p, cmd, args)
		return true
	case "SCRIPT":
		e.script(p, args)
		return true
	case "MULTI":
		e.multi.Store(p, struct{}{})
	case "EXEC", "DISCARD":
		e.multi.Delete(p)
	}
	e.pass(p, cmd, args)
	return true
}

// spinLimit is how many commands a node takes at one instant of virtual
// time before it reports a spin: something that sends commands in a loop
// without letting time pass stops a simulation's clock.
const spinLimit = 200000

// spin counts the commands of one instant, and reports a spin once, with
// the last commands and every goroutine's stack, on standard error.
func (e *engine) spin(cmd string, args []string) {
	now := time.Now()
	if !now.Equal(e.spinAt) {
		e.spinAt, e.spinN, e.spinLog = now, 0, e.spinLog[:0]
		return
	}
	e.spinN++
	if e.spinN > spinLimit-20 && e.spinN <= spinLimit {
		e.spinLog = append(e.spinLog, cmd+" "+strings.Join(args[:min(len(args), 4)], " "))
	}
	if e.spinN == spinLimit {
		buf := make([]byte, 32<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "simnode: %d commands at one instant (%v): a loop that lets no time pass; the last:\n  %s\n%s\n",
			spinLimit, now, strings.Join(e.spinLog, "\n  "), buf)
	}
}

// pass runs a command in miniredis, under the engine's lock.
func (e *engine) pass(p *server.Peer, cmd string, args []string) {
	e.passing.Store(p)
	e.srv.Dispatch(p, append([]string{cmd}, args...))
	e.passing.Store(nil)
}

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// script answers SCRIPT LOAD, EXISTS and FLUSH.
func (e *engine) script(p *server.Peer, args []string) {
	if len(args) == 0 {
		p.WriteError("ERR wrong number of arguments for 'script' command")
		return
	}
	switch strings.ToUpper(args[0]) {
	case "FLUSH":
		clear(e.sources)
		p.WriteOK()
	case "LOAD":
		if len(args) != 2 {
			p.WriteError("ERR wrong number of arguments for 'script|load' command")
			return
		}
		sha := sha1hex(args[1])
		if _, err := e.compile(sha, args[1]); err != nil {
			p.WriteError(err.Error())
			return
		}
		e.sources[sha] = args[1]
		p.WriteBulk(sha)
	case "EXISTS":
		p.WriteLen(len(args) - 1)
		for _, sha := range args[1:] {
			if _, ok := e.sources[strings.ToLower(sha)]; ok {
				p.WriteInt(1)
			} else {
				p.WriteInt(0)
			}
		}
	default:
		p.WriteError(fmt.Sprintf("ERR unknown subcommand '%s'", args[0]))
	}
}

// protos holds the scripts compiled so far, by sha, for every node: SCRIPT
// FLUSH and restarts empty a node's script cache (sources), which makes
// EVALSHA fail, but a compiled script is the same everywhere.
var protos sync.Map

// compile returns the compiled script.
func (e *engine) compile(sha, src string) (*lua.FunctionProto, error) {
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

// eval runs EVAL or EVALSHA.
func (e *engine) eval(p *server.Peer, cmd string, args []string) {
	if len(args) < 2 {
		p.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(cmd)))
		return
	}
	sha, src := strings.ToLower(args[0]), ""
	if cmd == "EVAL" {
		src = args[0]
		sha = sha1hex(src)
	} else {
		var ok bool
		if src, ok = e.sources[sha]; !ok {
			p.WriteError("NOSCRIPT No matching script. Please use EVAL.")
			return
		}
	}
	nkeys, err := strconv.Atoi(args[1])
	switch {
	case err != nil:
		p.WriteError("ERR value is not an integer or out of range")
		return
	case nkeys < 0:
		p.WriteError("ERR Number of keys can't be negative")
		return
	case nkeys > len(args)-2:
		p.WriteError("ERR Number of keys can't be greater than number of args")
		return
	}
	proto, err := e.compile(sha, src)
	if err != nil {
		p.WriteError(err.Error())
		return
	}
	e.sources[sha] = src
	l := e.l
	l.SetGlobal("KEYS", strings2table(l, args[2:2+nkeys]))
	l.SetGlobal("ARGV", strings2table(l, args[2+nkeys:]))
	l.Push(l.NewFunctionFromProto(proto))
	err = l.PCall(0, 1, nil)
	e.db = nil
	if err != nil {
		l.SetTop(0)
		p.WriteError(fmt.Sprintf("ERR Error running script: %v", err))
		return
	}
	res := l.Get(-1)
	l.SetTop(0)
	writeLua(p, res)
}

func strings2table(l *lua.LState, ss []string) *lua.LTable {
	t := l.CreateTable(len(ss), 0)
	for i, s := range ss {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
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
	if e.db == nil {
		// The script's first command: TTLs pass up to the node's time
		// once, here, for every command of the script.
		e.db = e.m.DB(0)
	}
	if v, msg, ok := fast(l, e.db, e.now(), args); ok {
		if msg == "" {
			l.Push(v)
			return 1
		}
		if raise {
			l.RaiseError("%s", msg)
			return 0
		}
		t := l.NewTable()
		t.RawSetString("err", lua.LString(msg))
		l.Push(t)
		return 1
	}
	cmd := strings.ToUpper(args[0])
	e.out.Reset()
	e.outW.Reset(&e.out)
	nested := server.NewPeer(e.outW)
	switch cmd {
	case "EVAL", "EVALSHA", "SCRIPT", "MULTI", "EXEC", "SUBSCRIBE", "UNSUBSCRIBE":
		nested.WriteError("ERR This Redis command is not allowed from script")
	default:
		e.passing.Store(nested)
		e.srv.Dispatch(nested, args)
		e.passing.Store(nil)
	}
	_ = e.outW.Flush()
	e.outR.Reset(&e.out)
	res, err := server.ParseReply(e.outR)
	if err != nil {
		if raise {
			l.RaiseError("%s", err.Error())
			return 0
		}
		t := l.NewTable()
		t.RawSetString("err", lua.LString(err.Error()))
		l.Push(t)
		return 1
	}
	l.Push(toLua(l, res))
	return 1
}

// toLua converts a reply as Redis does for a script: integers to numbers,
// bulk strings to strings, a nil reply to false, a status to {ok = ...},
// arrays to tables.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LFalse
	case int:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []byte:
		return lua.LString(v)
	case server.Simple:
		t := l.NewTable()
		t.RawSetString("ok", lua.LString(v))
		return t
	case []any:
		t := l.CreateTable(len(v), 0)
		for i, e := range v {
			t.RawSetInt(i+1, toLua(l, e))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}

// writeLua writes a script's result as Redis converts it: numbers to
// integers (truncated), strings to bulk strings, true to 1, false and nil
// to a nil reply, {err = ...} to an error, {ok = ...} to a status, other
// tables to arrays up to their first nil.
func writeLua(p *server.Peer, v lua.LValue) {
	switch v := v.(type) {
	case lua.LNumber:
		p.WriteInt(int(v))
	case lua.LString:
		p.WriteBulk(string(v))
	case lua.LBool:
		if v {
			p.WriteInt(1)
		} else {
			p.WriteNull()
		}
	case *lua.LTable:
		if s := v.RawGetString("err"); s.Type() != lua.LTNil {
			p.WriteError(s.String())
			return
		}
		if s := v.RawGetString("ok"); s.Type() != lua.LTNil {
			p.WriteInline(s.String())
			return
		}
		var items []lua.LValue
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			items = append(items, e)
		}
		p.WriteLen(len(items))
		for _, e := range items {
			writeLua(p, e)
		}
	default:
		p.WriteNull()
	}
}

// errorReply is redis.error_reply: {err = msg}, "ERR " first when msg has
// no error code of its own.
func errorReply(l *lua.LState) int {
	msg := strings.TrimPrefix(l.CheckString(1), "-")
	if code, _, ok := strings.Cut(msg, " "); !ok || code == "" {
		msg = "ERR " + msg
	}
	t := l.NewTable()
	t.RawSetString("err", lua.LString(msg))
	l.Push(t)
	return 1
}

// statusReply is redis.status_reply: {ok = msg}.
func statusReply(l *lua.LState) int {
	t := l.NewTable()
	t.RawSetString("ok", lua.LString(l.CheckString(1)))
	l.Push(t)
	return 1
}
