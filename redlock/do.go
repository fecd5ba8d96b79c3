package redlock

import (
	"context"
	"errors"
	"time"
)

// Do runs fn while holding key: it waits for the lock as Lock does, calls
// fn with a context that ends when the lock's does (Lock.Context) or ctx
// does, extends the lock while fn runs (every ttl/3 unless WithAutoExtend
// says otherwise), and releases it when fn returns or panics. fn's error
// comes back joined with the cause when the lock ended first (ErrLockLost,
// ErrExpired), or with Unlock's error when the release failed. fn is not
// called when the lock is not acquired (Lock's errors) or too little of
// its validity is left (ErrExpired). fn must watch its context; WithMaxHold
// bounds a fn that never returns. See docs/critical-sections.md.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	return c.do(ctx, fn, opts, func(ctx context.Context, opts []LockOption) (*Lock, error) {
		return c.Lock(ctx, key, ttl, opts...)
	})
}

// do is Do and DoMulti: lock takes the lock with the options given.
func (c *Client) do(ctx context.Context, fn func(ctx context.Context) error, opts []LockOption, lock func(context.Context, []LockOption) (*Lock, error)) error {
	if fn == nil {
		return errors.New("redlock: Do needs a function to run")
	}
	// Automatic extension first, so that a WithAutoExtend in opts only
	// sets the interval.
	opts = append([]LockOption{lockOption(func(c *lockConfig) { c.autoExtend = true })}, opts...)
	l, err := lock(ctx, opts)
	if err != nil {
		return err
	}
	lctx := l.Context()
	fnCtx, stop := context.WithCancelCause(lctx)
	defer stop(nil)
	defer context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })()
	release := context.WithoutCancel(ctx)
	returned := false
	defer func() { // runs first: fn's context then ends with ErrReleased
		if !returned { // fn panicked or called runtime.Goexit
			_ = l.Unlock(release)
		}
	}()
	var fnErr error
	if lctx.Err() == nil {
		fnErr = fn(fnCtx)
	} // else the validity left was within the safety margin: fn must not start
	returned = true

	var cause error
	if lctx.Err() != nil {
		cause = context.Cause(lctx)
	}
	unlockErr := l.Unlock(release)
	switch {
	case cause != nil:
		// An ended lock's Unlock is expected to find little: its error
		// adds nothing to the cause.
		return joinErr(fnErr, cause)
	case unlockErr != nil:
		return joinErr(fnErr, unlockErr)
	}
	return fnErr
}

// joinErr joins err to fnErr unless fnErr already carries it.
func joinErr(fnErr, err error) error {
	switch {
	case fnErr == nil:
		return err
	case errors.Is(fnErr, err):
		return fnErr
	}
	return errors.Join(fnErr, err)
}
