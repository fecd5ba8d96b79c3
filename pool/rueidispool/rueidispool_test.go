package rueidispool_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/pooltest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/rueidispool"
	"github.com/quorumlock/redlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// factory makes rueidispool pools over rueidis clients of one node.
func factory(resp2 bool) pooltest.Factory {
	return pooltest.Factory{Subscriber: true, New: func(t testing.TB, addr, password string) pool.Pool {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: password,
			DisableCache: true, AlwaysRESP2: resp2, ConnWriteTimeout: time.Second, Dialer: dialer()})
		if password == "wr0ng-battery" {
			// rueidis authenticates when the client is made.
			require.Error(t, err)
			require.Contains(t, strings.ToUpper(err.Error()), "WRONGPASS")
			require.NotContains(t, err.Error(), password)
			return nil
		}
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return rueidispool.New(c)
	}}
}

func TestConformance_RESP3(t *testing.T) { pooltest.Run(t, factory(false)) }

func TestConformance_RESP2(t *testing.T) { pooltest.Run(t, factory(true)) }

func TestNew_nilClientIsANilPool(t *testing.T) {
	require.Nil(t, rueidispool.New(nil))
	_, err := redlock.New([]pool.Pool{rueidispool.New(nil)})
	require.ErrorContains(t, err, "nil")
}

func TestNew_namesTheNode(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, s.Addr(), rueidispool.New(c).Addr())
	require.Equal(t, "cache-a", rueidispool.New(c, rueidispool.WithName("cache-a")).Addr())
}

// dialer bounds connecting, so that a paused node does not hold a dial
// for rueidis' default 5s.
func dialer() net.Dialer { return net.Dialer{Timeout: time.Second, KeepAlive: time.Minute} }
