package redlock

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// Redis 7.0 refuses a command that a script calls, and that the user may
// not run, with "ERR The user executing the script can't run this command
// or subcommand script: <sha1>, on @user_script:<line>." (or "can't access
// ... keys", "can't publish to the channel"): neither NOPERM nor the
// command's name. The scripts are ours, so the line names the command
// (wire.Called knows every script's).

var deniedRE = regexp.MustCompile(`The user executing the script can't .* script: ([0-9a-f]{40}), on @user_script:(\d+)`)

// explainDenied returns err with the refused command named when err is a
// node's refusal of a command inside one of the scripts; err otherwise.
func explainDenied(err error) error {
	var re pool.ReplyError
	if !errors.As(err, &re) || !strings.Contains(string(re), "The user executing the script can't") {
		return err
	}
	cmd := "a command"
	if m := deniedRE.FindStringSubmatch(string(re)); m != nil {
		n, _ := strconv.Atoi(m[2])
		if c, ok := wire.Called(m[1], n); ok {
			cmd = c
		}
	}
	d := &deniedError{cmd: cmd, cause: re}
	var ne *pool.NodeError
	if errors.As(err, &ne) {
		return &pool.NodeError{Addr: ne.Addr, Op: ne.Op, Err: d}
	}
	return d
}

// deniedError is a refusal, for lack of permission, of a command that a
// script called.
type deniedError struct {
	cmd   string
	cause pool.ReplyError
}

func (e *deniedError) Error() string {
	return "NOPERM: the user may not run " + e.cmd + " (called by the script; docs/operations.md lists the ACL): " + string(e.cause)
}

func (e *deniedError) Unwrap() error { return e.cause }
