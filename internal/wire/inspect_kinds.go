package wire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// The inspection of the other kinds of lock: what a node holds for a
// semaphore, a read-write lock or an election, each read by one script
// that writes nothing.

// SemInspectArgs are the semaphore inspection's key count and keys: the
// permits slots of name, its size key and its queue.
func SemInspectArgs(name string, permits int) []any {
	args := make([]any, 0, permits+3)
	args = append(args, permits+2)
	for i := range permits {
		args = append(args, PermitKey(name, i))
	}
	return append(args, PermitsKey(name), PermitWaitersKey(name))
}

// RWInspectArgs are the read-write lock inspection's keys (RWKeys).
func RWInspectArgs(keys *[8]string) []any {
	return append(rwKeys(keys), RWMarker)
}

// ElectionInspectArgs are the election inspection's keys: the election
// key, its queue and fence counter, the leader record, and the epoch of
// its slot (the floor's name is built from it).
func ElectionInspectArgs(name string) []any {
	key := ElectionKey(name)
	return []any{key, WaitersKey(key), FenceKey(key), LeaderKey(name), EpochKey(keyslot.Slot(key))}
}

// Slot is what a node holds in one key: a token or a reservation.
type Slot struct {
	Value string // "" when the key is absent
	Held  bool   // the key exists
	PTTL  int64  // ms left; -1 without TTL
}

// SemInspection is a node's answer to the semaphore inspection.
type SemInspection struct {
	Size   int    // the size the node keeps; 0 when none was set
	Queued int64  // entries in the queue
	Slots  []Slot // every slot asked for, in order
}

// ParseSemInspect reads {size or nil, queued, then value or nil and pttl
// for each of permits slots}.
func ParseSemInspect(reply any, permits int) (SemInspection, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 2+2*permits {
		return SemInspection{}, fmt.Errorf("unexpected semaphore inspection reply %T", reply)
	}
	var in SemInspection
	if in.Queued, ok = vs[1].(int64); !ok {
		return SemInspection{}, errors.New("unexpected semaphore inspection reply")
	}
	if s, ok := String(vs[0]); ok {
		size, err := strconv.Atoi(s)
		if err != nil {
			return SemInspection{}, fmt.Errorf("semaphore size %q: %w", s, err)
		}
		in.Size = size
	}
	in.Slots = make([]Slot, permits)
	for i := range in.Slots {
		sl := &in.Slots[i]
		sl.Value, sl.Held = String(vs[2+2*i])
		if sl.PTTL, ok = vs[3+2*i].(int64); !ok {
			return SemInspection{}, errors.New("unexpected semaphore inspection reply")
		}
	}
	return in, nil
}

// RWInspection is a node's answer to the read-write lock inspection.
type RWInspection struct {
	Writer  Slot   // the writer's key
	Intent  Slot   // the first waiting writer: its id, and the ms its place has left
	Mutex   bool   // a mutex holds the name
	Expired int64  // readers whose hold ended, still in the hash
	Readers []Slot // the live readers: token and ms left
}

// ParseRWInspect reads {writer or nil, pttl, intent or nil, pttl, mutex,
// expired, then token and ms left of each live reader}.
func ParseRWInspect(reply any) (RWInspection, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) < 6 || len(vs)%2 != 0 {
		return RWInspection{}, fmt.Errorf("unexpected read-write lock inspection reply %T", reply)
	}
	var in RWInspection
	var ok1, ok2, ok3, ok4 bool
	in.Writer.Value, in.Writer.Held = String(vs[0])
	in.Writer.PTTL, ok1 = vs[1].(int64)
	in.Intent.Value, in.Intent.Held = String(vs[2])
	in.Intent.PTTL, ok2 = vs[3].(int64)
	mutex, ok3 := vs[4].(int64)
	in.Expired, ok4 = vs[5].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return RWInspection{}, errors.New("unexpected read-write lock inspection reply")
	}
	in.Mutex = mutex == 1
	for i := 6; i < len(vs); i += 2 {
		token, ok1 := String(vs[i])
		left, ok2 := vs[i+1].(int64)
		if !ok1 || !ok2 {
			return RWInspection{}, errors.New("unexpected read-write lock inspection reply")
		}
		in.Readers = append(in.Readers, Slot{Value: token, Held: true, PTTL: left})
	}
	return in, nil
}

// ParseElectionInspect reads the election inspection's reply: the
// election key as ParseInspect reads it, then the leader record as
// ParseLeaderRead reads it (with the token the key holds).
func ParseElectionInspect(reply any) (Inspection, LeaderRecord, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs) != 8 {
		return Inspection{}, LeaderRecord{}, fmt.Errorf("unexpected election inspection reply %T", reply)
	}
	in, err := ParseInspect(vs[:4])
	if err != nil {
		return Inspection{}, LeaderRecord{}, err
	}
	rec, err := ParseLeaderRead([]any{vs[0], vs[4], vs[5], vs[6], vs[7]})
	return in, rec, err
}
