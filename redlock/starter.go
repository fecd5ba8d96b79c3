package redlock

import (
	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/pool"
)

// starter is a pool that takes commands without a goroutine per call and
// keeps the order of those started on one key (pool.New's *pool.Node).
// Only this module can implement it.
type starter = async.Starter[*pool.Script]

// txStarter is a starter that also sends transactions (pool.New's
// *pool.Node): a waiting call's first round queues it without a script.
type txStarter = async.TxStarter
