package redlock

import (
	"crypto/rand"
	"fmt"
	"io"
	"sync"

	"github.com/google/uuid"
)

// newToken returns 122 random bits from crypto/rand as a UUID string
// (version 4). The random bytes are read in blocks (tokenBlock), each
// byte used once.
func newToken() (string, error) {
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
	return u.String(), nil
}

// tokenBlock is random bytes for tokens, read from crypto/rand 512 at a
// time instead of 16, which costs an allocation and a system call each.
type tokenBlock struct {
	b    [512]byte
	used int
}

var tokenBlocks = sync.Pool{New: func() any { return &tokenBlock{used: 512} }}
