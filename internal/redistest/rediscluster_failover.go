package redistest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// CutReplication stops master's replica from receiving master's writes,
// for good: writes master acknowledged before the call have reached the
// replica when it returns (it waits for the replica to catch up, for up to
// about 5s), and no write after does.
//
// It sets the replica's masteruser and masterauth to credentials that no
// node accepts (CONFIG SET) and then kills its link to master (CLIENT KILL
// TYPE master). The replica keeps trying to reconnect, once a second, but
// its AUTH fails every time, so it never resynchronizes; it stays a
// replica of master in the cluster's view, and FailOver can still promote
// it, with the data it had at the cut.
func (rc *RedisCluster) CutReplication(master *Server) error {
	r := rc.ReplicaOf(master)
	if r == nil {
		return fmt.Errorf("redistest: cut replication: %s is not a master with a replica", master.Addr())
	}
	want, err := replOffset(master)
	if err != nil {
		return fmt.Errorf("redistest: cut replication: %s: %w", master.Addr(), err)
	}
	caughtUp := func() (bool, string) {
		got, err := replOffset(r)
		if err != nil {
			return false, err.Error()
		}
		return got >= want, fmt.Sprintf("offset %d, master's %d", got, want)
	}
	if err := waitFor("the replica "+r.Addr()+" did not catch up", cutWithin, caughtUp); err != nil {
		return err
	}
	for _, kv := range [][2]string{{"masteruser", cutUser}, {"masterauth", cutPassword}} {
		if _, err := r.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			return fmt.Errorf("redistest: cut replication: %s: CONFIG SET %s: %w", r.Addr(), kv[0], err)
		}
	}
	if _, err := r.Do("CLIENT", "KILL", "TYPE", "master"); err != nil {
		return fmt.Errorf("redistest: cut replication: %s: CLIENT KILL TYPE master: %w", r.Addr(), err)
	}
	return waitFor("the replica "+r.Addr()+" kept its link", cutWithin, func() (bool, string) {
		info, err := redis.String(r.Do("INFO", "replication"))
		if err != nil {
			return false, err.Error()
		}
		return infoField(info, "master_link_status") == "down", strings.ReplaceAll(info, "\r\n", " ")
	})
}

// FailOver kills master (SIGKILL) and promotes its replica in its place
// with CLUSTER FAILOVER TAKEOVER, which needs neither the master nor a
// vote. Before the kill it bumps a master's config epoch (CLUSTER
// BUMPEPOCH) so that the takeover's epoch is sure to beat master's. It waits, for up to 15s, until the replica reports role:master and
// every surviving member reports cluster_state:ok and, in CLUSTER SLOTS,
// the promoted node serving master's slots. From then on MasterFor returns
// the promoted node for those slots, Masters lists it in master's place,
// and it has no replica. The promoted node's replication id (master_replid)
// is new; its data is what it had replicated, so writes master acknowledged
// after CutReplication are lost.
func (rc *RedisCluster) FailOver(master *Server) (promoted *Server, err error) {
	i, r := rc.ownerIndex(master)
	if r == nil {
		return nil, fmt.Errorf("redistest: fail over: %s is not a master with a replica", master.Addr())
	}
	if err := rc.outrank(master, r); err != nil {
		return nil, err
	}
	if err := master.Kill(); err != nil {
		return nil, err
	}
	if _, err := r.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		return nil, fmt.Errorf("redistest: fail over: %s: CLUSTER FAILOVER TAKEOVER: %w", r.Addr(), err)
	}
	rc.mu.Lock()
	rc.owner[i], rc.replica[i] = r, nil
	rc.mu.Unlock()
	err = waitFor("the cluster did not settle on "+r.Addr(), failOverWithin, func() (bool, string) {
		return rc.servedBy(rc.first[i], r)
	})
	return r, err
}

// outrank makes sure that r, master's replica, will take a config epoch
// greater than any other node's when it takes over. TAKEOVER bumps r's
// epoch only if it is not already the greatest r knows of; a replica's own
// epoch is not kept apart from the others', so it may equal master's, and
// then the other nodes, which settle a claim to slots by the greater
// epoch, would keep master's slots with master. So outrank bumps the epoch
// of master or, if master's is already the greatest, of another master
// (CLUSTER BUMPEPOCH), and waits until r has heard of the new epoch: r's
// is then below it and TAKEOVER bumps. If no master can bump (a lone
// master), no other node has to be convinced.
func (rc *RedisCluster) outrank(master, r *Server) error {
	candidates := []*Server{master}
	for _, m := range rc.Masters() {
		if m != master && m.Running() {
			candidates = append(candidates, m)
		}
	}
	for _, m := range candidates {
		reply, err := redis.String(m.Do("CLUSTER", "BUMPEPOCH"))
		if err != nil {
			return fmt.Errorf("redistest: fail over: %s: CLUSTER BUMPEPOCH: %w", m.Addr(), err)
		}
		var verb string
		var epoch int64
		if _, err := fmt.Sscan(reply, &verb, &epoch); err != nil {
			return fmt.Errorf("redistest: fail over: %s: CLUSTER BUMPEPOCH replied %q", m.Addr(), reply)
		}
		if verb == "BUMPED" {
			return waitFor("the replica "+r.Addr()+" did not learn epoch "+strconv.FormatInt(epoch, 10), failOverWithin, epochAtLeast(r, epoch))
		}
	}
	return nil
}

// epochAtLeast returns a condition for waitFor: s's current epoch is at
// least epoch.
func epochAtLeast(s *Server, epoch int64) func() (bool, string) {
	return func() (bool, string) {
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		if err != nil {
			return false, err.Error()
		}
		got, _ := strconv.ParseInt(infoField(info, "cluster_current_epoch"), 10, 64)
		return got >= epoch, strings.ReplaceAll(info, "\r\n", " ")
	}
}

// ownerIndex returns the slot range master serves and its replica, or a
// nil replica if it serves none or has none.
func (rc *RedisCluster) ownerIndex(master *Server) (int, *Server) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, m := range rc.owner {
		if m == master {
			return i, rc.replica[i]
		}
	}
	return -1, nil
}

// servedBy reports whether promoted is a master and every running member
// reports cluster_state:ok and promoted serving slot.
func (rc *RedisCluster) servedBy(slot uint16, promoted *Server) (bool, string) {
	info, err := redis.String(promoted.Do("INFO", "replication"))
	if err != nil {
		return false, err.Error()
	}
	if role := infoField(info, "role"); role != "master" {
		return false, promoted.Addr() + " has role " + role
	}
	for _, s := range rc.members() {
		if !s.Running() {
			continue
		}
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return false, s.Addr() + ": " + strings.ReplaceAll(info, "\r\n", " ")
		}
		port, err := slotMasterPort(s, slot)
		if err != nil || port != promoted.Port() {
			return false, fmt.Sprintf("%s: slot %d served by port %d (%v), want %d", s.Addr(), slot, port, err, promoted.Port())
		}
	}
	return true, ""
}

// slotMasterPort returns the port of the master that s's CLUSTER SLOTS
// names for slot, or 0 if none.
func slotMasterPort(s *Server, slot uint16) (int, error) {
	ranges, err := redis.Values(s.Do("CLUSTER", "SLOTS"))
	if err != nil {
		return 0, err
	}
	for _, r := range ranges {
		fields, err := redis.Values(r, nil)
		if err != nil || len(fields) < 3 {
			return 0, fmt.Errorf("malformed CLUSTER SLOTS entry %v", r)
		}
		from, _ := redis.Int(fields[0], nil)
		to, _ := redis.Int(fields[1], nil)
		if int(slot) < from || int(slot) > to {
			continue
		}
		node, err := redis.Values(fields[2], nil)
		if err != nil || len(node) < 2 {
			return 0, fmt.Errorf("malformed CLUSTER SLOTS node %v", fields[2])
		}
		return redis.Int(node[1], nil)
	}
	return 0, nil
}
