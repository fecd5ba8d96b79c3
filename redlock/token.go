package redlock

import (
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/google/uuid"
)

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
