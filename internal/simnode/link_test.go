package simnode

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
)

// readCommand reads what clients send, including bulk strings longer than
// its buffer, and names what it cannot read.
func TestReadCommand(t *testing.T) {
	big := strings.Repeat("x", 40<<10)
	in := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" + fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n", len(big), big) + "*1\r\n$4\r\nPING\r\n"
	r := bufio.NewReaderSize(strings.NewReader(in), 16<<10)
	for _, want := range [][]string{{"GET", "k"}, {"SET", "k", big}, {"PING"}} {
		got, err := readCommand(r)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("readCommand = %.40q, %v; want %.40q", got, err, want)
		}
	}
	for _, bad := range []string{"GET k\r\n", "*1\r\n$-1\r\n", "*0\r\n", "*1\r\n$3\r\nGETX\r\n", "*1\r\n$x\r\n", "*-2\r\n"} {
		if got, err := readCommand(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("readCommand(%q) = %q, want an error", bad, got)
		}
	}
}
