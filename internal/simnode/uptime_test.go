package simnode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// uptime_in_seconds is Redis's: the difference of the present and the
// start, each cut to a whole second, which runs up to a second ahead of
// the true uptime.
func TestUptimeSeconds_isTheDifferenceOfWholeSeconds(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		started, now time.Duration
		want         int64
	}{
		{9900 * time.Millisecond, 10 * time.Second, 1}, // 0.1s up, reported 1
		{0, 999 * time.Millisecond, 0},
		{100 * time.Millisecond, 1100 * time.Millisecond, 1},
		{900 * time.Millisecond, 2100 * time.Millisecond, 2}, // 1.2s up
		{5 * time.Second, 4 * time.Second, 0},                // a clock that went back
	} {
		require.Equal(t, c.want, uptimeSeconds(base.Add(c.started), base.Add(c.now)), "%v to %v", c.started, c.now)
	}
}
