package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	portAttempts = 5               // fresh ports tried by Start
	bindRetryFor = 2 * time.Second // Restart's retry window for a busy port
	bindRetryGap = 50 * time.Millisecond
	pauseTimeout = time.Second // for SIGSTOP to take effect
)

// errClosed is returned by operations on a Server whose Cluster was closed.
var errClosed = errors.New("redistest: server closed")

// Server is one redis-server node. Its methods are safe for concurrent use.
type Server struct {
	// Set before the Server is handed out, then read-only.
	bin      string
	dir      string
	logPath  string
	password string
	extra    []string
	durable  bool
	port     int
	addr     string
	tls      bool // with a TLS port (Options.TLSPort)
	tlsPort  int

	mu     sync.Mutex // guards the fields below and serializes state changes
	p      *proc      // current or last process; nil if never started or killed
	paused bool
	closed bool
}

// newServer creates the node's temporary directory under parent.
func newServer(bin string, opts Options) (*Server, error) {
	dir, err := os.MkdirTemp(opts.Dir, "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return &Server{
		bin:      bin,
		dir:      dir,
		logPath:  filepath.Join(dir, "redis.log"),
		password: opts.Password,
		extra:    append([]string(nil), opts.Args...),
		durable:  opts.Durable,
		tls:      opts.TLSPort,
	}, nil
}

// Addr returns the node's address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.addr }

// TLSAddr returns the node's TLS address, "127.0.0.1:PORT", with
// Options.TLSPort; "" without. It stays the same across restarts.
func (s *Server) TLSAddr() string {
	if !s.tls {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// Port returns the node's TCP port, which stays the same across restarts.
func (s *Server) Port() int { return s.port }

// Running reports whether the node's process is alive (possibly paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool { return s.p != nil && !s.p.exited() }

// Kill sends SIGKILL to the node (resuming it first if paused) and waits for
// it to exit. Killing a node that is not running is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.haltLocked((*proc).kill)
}

// stop shuts the node down with SIGTERM, then SIGKILL after termGrace, and
// marks it closed.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.haltLocked((*proc).stop)
}

// haltLocked ends the current process with halt and forgets it.
func (s *Server) haltLocked(halt func(*proc) error) error {
	if s.p == nil {
		return nil
	}
	if err := halt(s.p); err != nil {
		return fmt.Errorf("redistest: stopping %s: %w", s.addr, err)
	}
	s.p, s.paused = nil, false
	return nil
}

// Restart starts the node again on the same port and directory and waits
// until it answers. Data is lost unless the cluster is durable
// (Options.Durable), in which case the node reloads what it had written. It
// fails if the node is running, and retries for up to about 2s if the port
// is busy.
func (s *Server) Restart() error {
	return s.restart(false)
}

// RestartEmpty is Restart without any data: it removes the node's
// persistence files (append-only directory and snapshot) first, so that
// even a durable node comes back empty.
func (s *Server) RestartEmpty() error {
	return s.restart(true)
}

// restart is Restart, wiping the persistence files first when empty.
func (s *Server) restart(empty bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errClosed
	case s.runningLocked():
		return fmt.Errorf("redistest: restart %s: already running", s.addr)
	}
	if empty {
		if err := s.wipeLocked(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(bindRetryFor)
	for {
		err := s.startLocked()
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(bindRetryGap)
	}
}

// wipeLocked removes the node's persistence files; the log stays.
func (s *Server) wipeLocked() error {
	for _, name := range []string{"appendonlydir", "appendonly.aof", "dump.rdb"} {
		if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
			return fmt.Errorf("redistest: wiping %s: %w", s.addr, err)
		}
	}
	return nil
}

// startFresh starts a new node on a free port, trying other ports if the
// chosen one is taken before redis-server binds it. It removes the node's
// directory on failure.
func (s *Server) startFresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range portAttempts {
		if s.port, err = freePort(); err != nil {
			break
		}
		if s.tls {
			if s.tlsPort, err = freePort(); err != nil {
				break
			}
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.startLocked(); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		s.closed = true
		os.RemoveAll(s.dir)
	}
	return err
}

// startLocked launches redis-server and waits until it is ready.
func (s *Server) startLocked() error {
	p, err := launch(s.bin, s.args(), s.dir, s.logPath)
	if err != nil {
		return fmt.Errorf("redistest: starting %s: %w", s.bin, err)
	}
	if err := p.waitReady(s.addr, s.password); err != nil {
		return err // waitReady leaves no process behind
	}
	s.p, s.paused = p, false
	return nil
}

// args returns the redis-server command line.
func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--save", "",
	}
	if s.durable {
		// Rewriting the file once it passes 1MB keeps a restart's replay
		// short however long the node ran.
		a = append(a, "--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-min-size", "1mb")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.password != "" {
		a = append(a, "--requirepass", s.password)
	}
	if s.tls {
		a = append(a, "--tls-port", strconv.Itoa(s.tlsPort))
	}
	return append(a, s.extra...)
}

// Pause freezes the node with SIGSTOP: it keeps its port, and the kernel
// still accepts connections, but no command is answered until Resume.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return fmt.Errorf("redistest: pause %s: not running", s.addr)
	}
	if err := s.p.signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redistest: pause %s: %w", s.addr, err)
	}
	s.paused = true
	if err := waitStopped(s.p.pid(), pauseTimeout); err != nil {
		return fmt.Errorf("redistest: pause %s: %w", s.addr, err)
	}
	return nil
}

// Resume continues a paused node with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return fmt.Errorf("redistest: resume %s: not running", s.addr)
	}
	if err := s.p.signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redistest: resume %s: %w", s.addr, err)
	}
	s.paused = false
	return nil
}

// Do runs one administrative command on a fresh connection with 2s connect,
// read and write timeouts, authenticating with the password if one is set.
// It is meant for test setup and inspection.
func (s *Server) Do(cmd string, args ...any) (any, error) {
	return s.do(adminTimeout, cmd, args...)
}

// do is Do with a custom timeout.
func (s *Server) do(timeout time.Duration, cmd string, args ...any) (any, error) {
	return do(s.addr, s.password, timeout, cmd, args...)
}

// Pid returns the process id of the node's current process, or 0 when it
// is not running.
func (s *Server) Pid() int { return s.pid() }

// Paused reports whether the node is running and paused.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked() && s.paused
}

// pid returns the process id of the current process, or 0 if there is none.
func (s *Server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.pid()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
