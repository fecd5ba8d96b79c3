// Package lint holds checks of the repository's own code that go vet and
// staticcheck do not make: its tests are the checks.
package lint
