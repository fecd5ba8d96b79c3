#!/bin/bash
# Instructions a node runs per acquisition of a hot key, for each kind of
# internal/scriptcost, counted by valgrind's callgrind: the difference
# between a run of 1200 cycles and one of 200, divided by 1000. Needs
# valgrind and redis-server (or REDIS_SERVER) on PATH.
set -euo pipefail
server=${REDIS_SERVER:-redis-server}
bin=$(mktemp -d)/scriptcost
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./internal/scriptcost
count() { # kind cycles -> instructions of the whole server process
	local port out pid
	port=$((20000 + RANDOM % 20000))
	out=$(dirname "$bin")/callgrind.$port
	valgrind --tool=callgrind --callgrind-out-file="$out" "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
	pid=$!
	for _ in $(seq 1 200); do "$bin" -addr "127.0.0.1:$port" -kind polling -cycles 0 2>/dev/null && break; sleep 0.1; done
	"$bin" -addr "127.0.0.1:$port" -kind "$1" -cycles "$2"
	kill -TERM "$pid"
	wait "$pid" || true
	grep -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}'
}
for kind in queue polling; do
	a=$(count "$kind" 200)
	b=$(count "$kind" 1200)
	echo "$kind: $(((b - a) / 1000)) instructions per acquisition on the node"
done
