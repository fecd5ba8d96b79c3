module github.com/quorumlock/redlock/pool/goredis

go 1.22.0

require (
	github.com/quorumlock/redlock v0.1.0
	github.com/redis/go-redis/v9 v9.3.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/gomodule/redigo v1.9.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.11.0 // indirect
)
