module github.com/quorumlock/redlock

go 1.22.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/gomodule/redigo v1.9.3
	github.com/google/uuid v1.6.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.11.0
	golang.org/x/sys v0.30.0 // internal/faults, for the tests: CLOCK_MONOTONIC read across processes
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
