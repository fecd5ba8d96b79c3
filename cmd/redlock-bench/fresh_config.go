package main

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// freshFlags defines the flags of fresh mode.
func freshFlags(fs *flag.FlagSet, cfg *config) {
	fs.Func("tries", "fresh mode: each new Client makes at most `T` TryLocks for its key (default 3)", positiveSetter(&cfg.tries))
	fs.Func("pause", "fresh mode: wait `duration` between two TryLocks of a Client; 0: back to back (default 250ms)", durationSetter(&cfg.pause))
	fs.Func("bursts", "fresh mode: make `B` bursts of new Clients, closing every Client between two (default 3)", positiveSetter(&cfg.bursts))
	fs.Func("busy", "fresh mode: run `K` CPU-bound helper processes (this binary, GOMAXPROCS=1) beside the run, a core each", nonNegativeSetter(&cfg.busy))
}

// freshDefaults fills in the settings of fresh mode: a worker per
// Client, and the Clients, tries, pause and bursts when not given.
func (c config) freshDefaults() config {
	if c.mode != modeFresh {
		return c
	}
	if c.clients == 0 {
		c.clients = defaultFreshClients
	}
	c.workers = c.clients
	if c.tries == 0 {
		c.tries = defaultTries
	}
	if c.pause == byMode {
		c.pause = defaultPause
	}
	if c.bursts == 0 {
		c.bursts = defaultBursts
	}
	return c
}

// validateFresh checks the settings of fresh mode, and that the other
// modes were not given its flags. It takes the config before
// withDefaults.
func (c config) validateFresh() error {
	if c.mode != modeFresh {
		if c.tries != 0 || c.pause != byMode || c.bursts != 0 || c.busy != 0 {
			return fmt.Errorf("-tries, -pause, -bursts and -busy are for -mode fresh (not %s)", c.mode)
		}
		return nil
	}
	switch {
	case c.workers != 0:
		return errors.New("-mode fresh has one worker per Client: give -clients, not -workers")
	case c.duration != byMode:
		return errors.New("-mode fresh runs -bursts, not -duration")
	case c.hold != byMode:
		return errors.New("-mode fresh takes no -hold: each Client releases its key as soon as it has it")
	case c.pause < 0 && c.pause != byMode:
		return fmt.Errorf("-pause %v must not be negative", c.pause)
	case c.pool == poolPolling || c.pool == poolBoth || c.pool == poolAll:
		return fmt.Errorf("-mode fresh runs one kind of the library's pools: -client %s is not one (use pipelined, redigo, goredis or rueidis)", c.pool)
	case c.fault() != nil || c.floor || c.plot != "" || c.json:
		return errors.New("-mode fresh takes no -pause-node, -kill-node, -floor, -plot or -json (it measures its own dial floor)")
	}
	return nil
}

// freshTryTimeout bounds each TryLock and Unlock of fresh mode: a call
// that has not returned by then counts as failed. It is far above what
// the node timeout lets a call take, so that only a stalled machine
// reaches it.
func (c config) freshTryTimeout() time.Duration {
	return time.Second + 2*c.nodeTimeout
}

// freshBound is the longest a fresh run can take: the dial floor, and
// per burst every TryLock and pause, the Unlock, and some seconds to make
// and close the Clients. The busy helpers end by themselves after it
// (and a margin), should the run not kill them.
func (c config) freshBound() time.Duration {
	perBurst := time.Duration(c.tries)*(c.freshTryTimeout()+c.pause) + c.freshTryTimeout() + 10*time.Second
	return 3*poolTimeout + time.Duration(c.bursts)*perBurst
}
