package redlock

import (
	"context"
	"errors"
	"time"
)

// Do runs fn while holding key: it waits for the lock as Lock does, calls
// fn with the lock's context (see Lock.Context), extends the lock in the
// background while fn runs (every ttl/3 unless WithAutoExtend says
// otherwise), and releases the lock when fn returns. ctx bounds the wait
// and lends its values to fn's context. fn's context ends when the lock's
// context does, and also when ctx ends: a caller that shuts down stops fn
// too (the cause is then ctx's), and the lock is released when fn returns.
//
// When the lock ends before fn returns (lost, not extended in time, or a
// limit set with WithMaxHold reached), fn's context is
// cancelled at once, and Do returns fn's error joined with the cause
// (ErrLockLost or ErrExpired; errors.Is matches both). fn must watch its
// context: Do cannot stop a function that ignores it. Such a function that
// never returns keeps the lock for as long as extensions succeed, which is
// what WithMaxHold bounds: past it the lock is no
// longer extended and runs out.
//
// When fn returned while the lock was held and Unlock then fails (it found
// fewer than a quorum still holding our token, or the Client was closed),
// Do returns fn's error joined with Unlock's: the work ran, but the lock
// could not be shown to have been ours to the end, or could not be freed.
// Otherwise Do returns fn's error as it is.
//
// When fn panics, Do releases the lock and the panic goes on, with its
// own value and stack. The release is sent whatever ctx says, with ctx's
// values, and is bounded by the node timeout.
//
// Errors before fn runs are those of Lock: the lock was not acquired, or
// an argument or option is invalid; fn is then not called. Nor is it when
// the validity left after acquiring is within WithSafetyMargin: Do then
// releases the lock and returns ErrExpired.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...LockOption) error {
	if fn == nil {
		return errors.New("redlock: Do needs a function to run")
	}
	// Automatic extension first, so that a WithAutoExtend in opts only
	// sets the interval.
	opts = append([]LockOption{lockOption(func(c *lockConfig) { c.autoExtend = true })}, opts...)
	l, err := c.Lock(ctx, key, ttl, opts...)
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
