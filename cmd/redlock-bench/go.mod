module github.com/quorumlock/redlock/cmd/redlock-bench

go 1.23.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/gomodule/redigo v1.9.3
	github.com/quorumlock/redlock v0.1.0
	github.com/quorumlock/redlock/pool/goredis v0.1.0
	github.com/quorumlock/redlock/pool/rueidispool v0.1.0
	github.com/redis/go-redis/v9 v9.18.0
	github.com/redis/rueidis v1.0.69
	github.com/schollz/progressbar/v3 v3.18.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.12.0
	golang.org/x/term v0.28.0
	gonum.org/v1/plot v0.15.2
)

require (
	codeberg.org/go-fonts/liberation v0.4.1 // indirect
	codeberg.org/go-latex/latex v0.0.1 // indirect
	codeberg.org/go-pdf/fpdf v0.10.0 // indirect
	git.sr.ht/~sbinet/gg v0.6.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/campoy/embedmd v1.0.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/image v0.24.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
	golang.org/x/text v0.23.0 // indirect
)
