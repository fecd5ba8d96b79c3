package redistest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Timeouts bounding every wait in the package.
const (
	readyTimeout = 5 * time.Second        // for a new process to answer
	termGrace    = 2 * time.Second        // between SIGTERM and SIGKILL
	exitTimeout  = 5 * time.Second        // for a SIGKILLed process to be reaped
	probeTimeout = 250 * time.Millisecond // for one readiness probe
	probeEvery   = 10 * time.Millisecond  // between readiness probes
	logTailBytes = 2048                   // of log included in errors
)

// errAddrInUse reports that redis-server could not bind its port.
var errAddrInUse = errors.New("address already in use")

// proc is one redis-server process. A goroutine reaps it and closes done.
type proc struct {
	cmd     *exec.Cmd
	logPath string
	logOff  int64         // size of the log file when the process started
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // result of cmd.Wait; read only after done is closed
}

// launch starts bin with args in dir, appending its output to logPath.
func launch(bin string, args []string, dir, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = f // an *os.File is passed as is: no copying goroutine
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, logPath: logPath, logOff: off, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process; a process that already exited is not an error.
func (p *proc) signal(sig os.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// waitExit waits up to timeout for the process to be reaped.
func (p *proc) waitExit(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// kill resumes the process if stopped, SIGKILLs it and waits for it to be reaped.
func (p *proc) kill() error {
	_ = p.signal(syscall.SIGCONT)
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.waitExit(exitTimeout) {
		return fmt.Errorf("redistest: pid %d did not exit %v after SIGKILL", p.pid(), exitTimeout)
	}
	return nil
}

// stop resumes the process if stopped, sends SIGTERM, and falls back to
// SIGKILL if it has not exited after termGrace.
func (p *proc) stop() error {
	_ = p.signal(syscall.SIGCONT)
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if p.waitExit(termGrace) {
		return nil
	}
	return p.kill()
}

// waitReady waits until the process answers on addr. It fails if the process
// exits first (wrapping errAddrInUse if it could not bind) or after
// readyTimeout, in which case it kills the process.
func (p *proc) waitReady(addr, password string) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		if err := probe(addr, password, p.pid(), probeTimeout); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			kerr := p.kill()
			return errors.Join(fmt.Errorf("redistest: redis-server (pid %d) on %s not ready after %v; log:\n%s",
				p.pid(), addr, readyTimeout, p.logTail()), kerr)
		}
		select {
		case <-p.done:
			tail := p.logTail()
			err := fmt.Errorf("redistest: redis-server on %s exited before it was ready (%v); log:\n%s", addr, p.err, tail)
			if strings.Contains(tail, "Address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		case <-tick.C:
		}
	}
}

// logTail returns the end of what this process wrote to its log.
func (p *proc) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	off := max(p.logOff, fi.Size()-logTailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	s := string(b)
	if off > p.logOff {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = "...\n" + s[i+1:] // drop the partial first line
		}
	}
	if s = strings.TrimSpace(s); s == "" {
		return "(empty)"
	}
	return s
}
