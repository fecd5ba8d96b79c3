package redlock

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

var (
	//go:embed release.lua
	releaseSource string
	//go:embed extend.lua
	extendSource string
	//go:embed acquire_fenced.lua
	acquireFencedSource string
	//go:embed fence_store.lua
	fenceStoreSource string

	// The scripts take the key in KEYS and every value in ARGV; nothing is
	// ever interpolated into their source.
	releaseScript       = redis.NewScript(1, releaseSource)
	extendScript        = redis.NewScript(1, extendSource)
	acquireFencedScript = redis.NewScript(3, acquireFencedSource)
	fenceStoreScript    = redis.NewScript(1, fenceStoreSource)
)
