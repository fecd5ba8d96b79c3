package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Redis's uptime_in_seconds is the present second less the start second:
// a node started at 9.9s and asked at 10.0s says 1. Restart safety must
// count from the least uptime the report allows, or it counts a node that
// restarted empty up to a second before the maximum TTL has passed.
func TestParseFacts_uptimeIsTheLeastTheReportAllows(t *testing.T) {
	for up, want := range map[int64]time.Duration{0: 0, 1: 0, 2: time.Second, 60: 59 * time.Second} {
		f, err := parseFacts([]any{[]byte("0123abcd"), up, []byte("0123abcd")})
		require.NoError(t, err)
		require.Equal(t, want, f.uptime, "reported %ds", up)
	}
}
