module github.com/quorumlock/redlock/pool/rueidispool

go 1.23.0

require (
	github.com/quorumlock/redlock v0.1.0
	github.com/redis/rueidis v1.0.61
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/gomodule/redigo v1.9.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.11.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
)
