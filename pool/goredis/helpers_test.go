package goredis_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
)

// infoField returns a field of s's INFO section.
func infoField(t *testing.T, s *redistest.Server, section, field string) string {
	t.Helper()
	v, err := s.Do("INFO", section)
	require.NoError(t, err)
	b, _ := v.([]byte)
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return f
		}
	}
	return ""
}

// waitFor calls cond every 10ms, in the test's goroutine, until it
// returns true, and fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+msg, append([]any{timeout}, args...)...)
		}
	}
}

// exclusions records the EventNodeExcluded events of a Client.
type exclusions struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (e *exclusions) Round(*redlock.RoundInfo) {}
func (e *exclusions) Event(ev redlock.Event) {
	if ev.Kind == redlock.EventNodeExcluded {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	}
}

func (e *exclusions) list() []redlock.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]redlock.Event(nil), e.events...)
}
