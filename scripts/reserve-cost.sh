#!/usr/bin/env bash
# Measures what a reservation (reserve_failures) costs Redis, in CPU
# instructions, which unlike wall time do not move on a shared machine:
# a private redis-server runs under valgrind --tool=callgrind and each case
# of BenchmarkRedisReserve (internal/limits/reserve_bench_test.go) runs
# against it twice, with N1 and N2 decisions; callgrind's counters are
# zeroed before and dumped after each run, so
#
#   instructions per decision = (Ir(N2) - Ir(N1)) / (N2 - N1)
#
# cancels what does not grow with N (the benchmark's setup, the script
# load) and keeps what does, including deleting the keys a decision made
# (the test cleanup's SCAN and DEL; in production they expire instead).
# The server's timed background work (cron, incremental rehashing), which
# grows with wall time, and valgrind makes wall time long, is turned down
# (--hz 1, no active rehashing) so that it stays out of the counts.
#
#   ./scripts/reserve-cost.sh [N1 N2]      # default 200 600 (about a minute)
set -euo pipefail

cd "$(dirname "$0")/.."
N1=${1:-200}
N2=${2:-600}
PORT=${GUARD_COST_PORT:-6391}
work=$(mktemp -d)
trap 'kill "$vg" 2>/dev/null || true; wait "$vg" 2>/dev/null || true; rm -rf "$work"' EXIT

go test -c -o "$work/limits.test" ./internal/limits/
valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
	redis-server --port "$PORT" --save "" --appendonly no --dir "$work" \
	--hz 1 --dynamic-hz no --activerehashing no >"$work/vg.log" 2>&1 &
vg=$!
for _ in $(seq 100); do
	redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
	sleep 0.2
done

# run CASE N prints the instructions Redis spent on one benchmark run.
run() {
	callgrind_control -z "$vg" >/dev/null 2>&1
	GUARD_TEST_REDIS_URL="redis://127.0.0.1:$PORT/0" "$work/limits.test" \
		-test.run '^$' -test.bench "BenchmarkRedisReserve/^${1//+/\\+}\$" -test.benchtime "${2}x" >"$work/out"
	grep -q "^BenchmarkRedisReserve/$1-" "$work/out" || { cat "$work/out" >&2; echo "benchmark $1 did not run" >&2; exit 1; }
	callgrind_control -d "$vg" >/dev/null 2>&1
	f=$(ls -t "$work"/cg.*.* | head -1)
	awk '/^(summary|totals):/ {print $2; exit}' "$f"
	rm -f "$f"
}

printf '%-32s %12s\n' case "Ir/decision"
for c in check check+reserve check+report-failure check+reserve+settle-failure \
	check+report-success check+reserve+settle-success \
	check+reserve+fresh-ip check+reserve+distinct \
	check+reserve+settle-failure+fresh-ip check+reserve+distinct+settle-failure \
	check+reserve+settle-success+fresh-ip check+reserve+distinct+settle-success; do
	a=$(run "$c" "$N1")
	b=$(run "$c" "$N2")
	printf '%-32s %12d\n' "$c" $(((b - a) / (N2 - N1)))
done
