#!/usr/bin/env bash
# Counts the CPU instructions Redis spends on one decision of Guard's
# function library, which unlike wall time do not move on a shared machine
# (docs/performance.md, "The decision in Redis instructions"): a private
# redis-server runs under valgrind --tool=callgrind, the library is loaded
# as Guard loads it, and redis-benchmark sends N1 and then N2 FCALLs of the
# bench's 3-rule login check (scripts/lib.sh login_call: random identities,
# so nearly every call creates its keys; one connection, 16 calls per
# pipeline, as Guard's batcher sends them under load), and then of a failed
# login's report under the same policy (report_call). Counters are zeroed
# before and dumped after each run, so
#
#   instructions per call = (Ir(N2) - Ir(N1)) / (N2 - N1)
#
# is everything Redis does per call: reading it off the socket, FCALL, the
# Lua function, the commands it runs, the reply. "empty" is a check with
# no keys (the function reads TIME and returns): the cost of an FCALL.
#
#   ./scripts/redis-cost.sh [N1 N2]      # default 2000 6000 (about a minute)
set -euo pipefail

cd "$(dirname "$0")/.."
GUARD_SCRIPT=redis-cost.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh
command -v valgrind >/dev/null 2>&1 || apt_install valgrind
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
N1=${1:-2000}
N2=${2:-6000}
PORT=${GUARD_COST_PORT:-6392}
work=$(mktemp -d)
trap 'kill "$vg" 2>/dev/null || true; wait "$vg" 2>/dev/null || true; rm -rf "$work"' EXIT

valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
	redis-server --port "$PORT" --save "" --appendonly no --dir "$work" \
	--hz 1 --dynamic-hz no --activerehashing no >"$work/vg.log" 2>&1 &
vg=$!
wait_for "Redis under callgrind" sh -c "redis-cli -p $PORT ping | grep -q PONG"
guard_fn_load "$PORT"
fn=$(guard_fn)
login_call
report_call

# run N ARGS... prints the instructions Redis spent on N calls of ARGS.
run() {
	local n=$1
	shift
	callgrind_control -z "$vg" >/dev/null 2>&1
	redis-benchmark -p "$PORT" -c 1 -P 16 -n "$n" -r 1000000 "$@" >/dev/null
	callgrind_control -d "$vg" >/dev/null 2>&1
	f=$(ls -t "$work"/cg.*.* | head -1)
	awk '/^(summary|totals):/ {print $2; exit}' "$f"
	rm -f "$f"
}
per_call() {
	local a b
	a=$(run "$N1" "$@")
	b=$(run "$N2" "$@")
	echo $(((b - a) / (N2 - N1)))
}

printf '%-40s %12s\n' "call ($fn)" "Ir/call"
printf '%-40s %12d\n' "empty (check without keys)" "$(per_call fcall "$fn" 0 'check 0 0 0 0 0 0 0 0 0' 1 '')"
printf '%-40s %12d\n' "login check (${#LOGIN_KEYS[@]} keys, allowed)" \
	"$(per_call fcall "$fn" "${#LOGIN_KEYS[@]}" "${LOGIN_KEYS[@]}" "${LOGIN_ARGS[@]}")"
printf '%-40s %12d\n' "failure report (${#REPORT_KEYS[@]} keys)" \
	"$(per_call fcall "$fn" "${#REPORT_KEYS[@]}" "${REPORT_KEYS[@]}" "${REPORT_ARGS[@]}")"
