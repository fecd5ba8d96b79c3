package redlock

import (
	"crypto/rand"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// The token formats, all here:
//   - a round's token: "<client id>:<uuid>" (newTokenWith with the
//     Client's prefix), so that Inspect can tell whose a lock is;
//   - a waiting Lock call's id: "<client id>.<n>", n in base 36
//     (newWaiter); the nodes find the Client's hand-off channel from it;
//   - its hand-off token: "<call id>/<uuid>", which the node keeps in the
//     call's queue entry;
//   - the token of its script rounds: "<hand-off token>/<round>"
//     (waiterRoundToken), and what a node that hands the key to the call
//     after round <round> sets: "<hand-off token>/h<round>"
//     (handedOffToken), so that a lock that waited can be released by
//     its token alone (Restore, waitToken).

// newToken returns 122 random bits from crypto/rand as a UUID string
// (version 4). The random bytes are read in blocks (tokenBlock), each
// byte used once.
func newToken() (string, error) { return newTokenWith("") }

// newTokenWith returns prefix followed by a new token, in one allocation.
func newTokenWith(prefix string) (string, error) {
	tb := tokenBlocks.Get().(*tokenBlock)
	defer tokenBlocks.Put(tb)
	if tb.used+16 > len(tb.b) {
		if _, err := io.ReadFull(rand.Reader, tb.b[:]); err != nil {
			return "", fmt.Errorf("redlock: generating a token: %w", err)
		}
		tb.used = 0
	}
	var u uuid.UUID
	copy(u[:], tb.b[tb.used:])
	clear(tb.b[tb.used : tb.used+16])
	tb.used += 16
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var text [36]byte
	encodeUUID(&text, u)
	var b strings.Builder
	b.Grow(len(prefix) + len(text))
	b.WriteString(prefix)
	b.Write(text[:])
	return b.String(), nil
}

// encodeUUID writes u in its canonical form, xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func encodeUUID(dst *[36]byte, u uuid.UUID) {
	const hexDigits = "0123456789abcdef"
	j := 0
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j], dst[j+1] = hexDigits[b>>4], hexDigits[b&0x0f]
		j += 2
	}
}

// tokenBlock is random bytes for tokens, read from crypto/rand 512 at a
// time instead of 16, which costs an allocation and a system call each.
type tokenBlock struct {
	b    [512]byte
	used int
}

var tokenBlocks = sync.Pool{New: func() any { return &tokenBlock{used: 512} }}

// waiterRoundToken is the token of round n of a waiting call whose
// hand-off token is handoff.
func waiterRoundToken(handoff string, n int) string {
	return handoff + "/" + strconv.Itoa(n)
}

// handedOffToken is what a node that handed the key to a waiting call
// after its round n sets (queue.lua): not round n's own token, which the
// release of round n, should it fail, gives up.
func handedOffToken(handoff string, n int) string {
	return handoff + "/h" + strconv.Itoa(n)
}

// extendAlso is what Extend accepts besides token (wire.ExtendArgs), for
// a lock of the waiting call whose hand-off token is handoff ("" for
// none): for a round's token ("<handoff>/<round>"), what a hand-off after
// that round sets (handedOffToken); "" for any other token (a hand-off's
// value is the token itself).
func extendAlso(token, handoff string) string {
	if handoff == "" || len(token) <= len(handoff)+1 || token[len(handoff)+1] == 'h' {
		return ""
	}
	return handoff + "/h" + token[len(handoff)+1:]
}

// waitToken reads a token made for a Lock call that waited: its hand-off
// token ("<call id>/<uuid>"), a round token of it ("<hand-off
// token>/<round>"), or what a hand-off after a round sets ("<hand-off
// token>/h<round>"). It returns the call's id, and the hand-off token
// for the last two; ok is false for any other token.
func waitToken(token string) (id, handoff string, ok bool) {
	id, rest, found := strings.Cut(token, "/")
	if !found || !waiterID(id) {
		return "", "", false
	}
	secret, round, isRound := strings.Cut(rest, "/")
	if _, err := uuid.Parse(secret); err != nil || len(secret) != 36 {
		return "", "", false
	}
	if !isRound {
		return id, "", true
	}
	digits := strings.TrimPrefix(round, "h")
	if n, err := strconv.Atoi(digits); err != nil || n < 1 || strconv.Itoa(n) != digits {
		return "", "", false
	}
	return id, id + "/" + secret, true
}

// waiterID reports whether id has the form of a Lock call's id: a Client
// id, a dot, a number in base 36.
func waiterID(id string) bool {
	cid, n, found := strings.Cut(id, ".")
	return found && base36(cid) && base36(n)
}

func base36(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return true
}

// tokenClient returns the ID of the Client that made token, "" when it
// cannot be told. A lock's token is "<client>:<random>" (TryLock and first
// rounds) or starts with a waiting call's id, "<client>.<n>/" (waitToken).
func tokenClient(token string) string {
	if id, _, ok := waitToken(token); ok {
		cid, _, _ := strings.Cut(id, ".")
		return cid
	}
	if cid, secret, ok := strings.Cut(token, ":"); ok && base36(cid) && len(secret) == 36 {
		return cid
	}
	return ""
}
