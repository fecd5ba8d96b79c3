//go:build race

package pool_test

// raceEnabled is set when the tests run under the race detector, which
// allocates on its own: allocation counts are not checked then.
const raceEnabled = true
