package redlock

import (
	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/pool"
)

// starter is a pool's way to take commands without a goroutine per call,
// keeping the order of those started on one key (pool.New's nodes have
// one, outside their exported methods). Only this module can implement it.
type starter = async.Starter[*pool.Script]

// txStarter is a starter that also sends transactions (pool.New's nodes'
// starters): a waiting call's first round queues it without a script.
type txStarter = async.TxStarter

// startersOf finds each pool's starter, once for the Client's life
// (async.StarterOf): starters[i] is pools[i]'s, or nil when it has none;
// txStarters[i] is the same starter when it sends transactions, else nil.
func startersOf(pools []pool.Pool) (starters []starter, txStarters []txStarter) {
	starters, txStarters = make([]starter, len(pools)), make([]txStarter, len(pools))
	for i, p := range pools {
		if s := async.StarterOf[*pool.Script](p); s != nil {
			starters[i] = s
			txStarters[i], _ = s.(txStarter)
		}
	}
	return starters, txStarters
}

// oneConn reports whether starter s sends all its node's commands on one
// connection (async.OneConn): a grant that goes out beside the node's
// first restart check then comes on the check's connection, and needs
// no proof of its dataset (countProved).
func oneConn(s starter) bool {
	o, ok := s.(async.OneConn)
	return ok && o.OneConnection()
}

// connector is a starter that tells when its node's connection is being
// opened (async.Connecting): a round waits for such a node past its node
// timeout (round.graceLeft).
type connector = async.Connecting

// connectorOf returns s as a connector, or nil when it is not one.
func connectorOf(s starter) connector {
	cn, _ := s.(connector)
	return cn
}
