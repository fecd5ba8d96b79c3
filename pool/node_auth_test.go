package pool_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

// Authentication (password, ACL user), the database and the client name;
// passwords never show in errors.

func TestNode_Do_withAWrongPasswordFailsWithoutLeakingPasswords(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("wrong-pass-xyz"))

	_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
	ne := requireNodeError(t, err, s.Addr())
	require.NotContains(t, err.Error(), "wrong-pass-xyz")
	require.NotContains(t, err.Error(), "s3cret-pass")
	require.Contains(t, err.Error(), "WRONGPASS")
	require.True(t, ne.Replied(), "the node answered WRONGPASS: %v", err)
	require.False(t, isTimeout(err))
}

func TestNode_Do_withTheRightPasswordWorks(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"))
	ctx := ctxTimeout(t, waitLimit)

	_, err := n.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	v, err := redis.String(n.Do(ctx, "GET", "k"))
	require.NoError(t, err)
	require.Equal(t, "v", v)

	// Without a password the node answers NOAUTH.
	anon := newNode(t, s.Addr())
	_, err = anon.Do(ctx, "GET", "k")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Replied())
	require.Contains(t, err.Error(), "NOAUTH")
}

func TestNode_Do_redactsThePasswordFromErrorText(t *testing.T) {
	t.Parallel()
	s := startNode(t, redistest.Options{Password: "s3cret-pass"})
	n := newNode(t, s.Addr(), pool.WithPassword("s3cret-pass"))

	// Redis quotes an unknown subcommand in its error reply.
	_, err := n.Do(ctxTimeout(t, waitLimit), "CONFIG", "s3cret-pass")
	ne := requireNodeError(t, err, s.Addr())
	var re pool.ReplyError
	require.ErrorAs(t, err, &re, "redaction keeps the ReplyError reachable")
	require.Contains(t, string(re), "s3cret-pass", "sanity: the reply itself quotes the password")
	require.True(t, ne.Replied())
	require.NotContains(t, err.Error(), "s3cret-pass")
	require.Contains(t, err.Error(), "xxxxx")
}

func TestNode_Do_authenticatesAsAnACLUser(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	_, err := s.Do("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all")
	require.NoError(t, err)
	ctx := ctxTimeout(t, waitLimit)

	n := newNode(t, s.Addr(), pool.WithUser("alice", "alicepw"))
	who, err := redis.String(n.Do(ctx, "ACL", "WHOAMI"))
	require.NoError(t, err)
	require.Equal(t, "alice", who)

	bad := newNode(t, s.Addr(), pool.WithUser("alice", "bad-alice-pw"))
	_, err = bad.Do(ctx, "PING")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Replied())
	require.NotContains(t, err.Error(), "bad-alice-pw")
	require.NotContains(t, err.Error(), "alicepw")
}

func TestNode_Do_usesTheSelectedDB(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	ctx := ctxTimeout(t, waitLimit)

	n3 := newNode(t, s.Addr(), pool.WithDB(3))
	_, err := n3.Do(ctx, "SET", "dbkey", "in-three")
	require.NoError(t, err)
	info, err := redis.String(n3.Do(ctx, "CLIENT", "INFO"))
	require.NoError(t, err)
	require.Contains(t, info, " db=3 ")

	keyspace, err := redis.String(s.Do("INFO", "keyspace"))
	require.NoError(t, err)
	require.Contains(t, keyspace, "db3:keys=1")
	require.NotContains(t, keyspace, "db0:")

	n0 := newNode(t, s.Addr())
	_, err = redis.String(n0.Do(ctx, "GET", "dbkey"))
	require.ErrorIs(t, err, redis.ErrNil, "db 0 does not have the key")
	v, err := redis.String(n3.Do(ctx, "GET", "dbkey"))
	require.NoError(t, err)
	require.Equal(t, "in-three", v)
}

func TestNode_Do_namesItsConnections(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	n := newNode(t, s.Addr(), pool.WithClientName("bench-x"))

	name, err := redis.String(n.Do(ctxTimeout(t, waitLimit), "CLIENT", "GETNAME"))
	require.NoError(t, err)
	require.Equal(t, "bench-x", name)
	require.Contains(t, clientList(t, s), "name=bench-x", "the idle connection shows in CLIENT LIST")
}
