#!/usr/bin/env bash
# Measures Guard against the raw servers it stands on, in one run on one
# machine (docs/performance.md, "Decisions over HTTP"):
#
#   ./scripts/bench.sh                       # 10 s per phase, 50 connections
#   BENCH_SECONDS=20 BENCH_CONNECTIONS=100 ./scripts/bench.sh
#   BENCH_PPROF=/tmp/guard.pprof ./scripts/bench.sh   # and a CPU profile
#                                                     # of Guard in step 3
#
# It starts a private Redis (port BENCH_REDIS_PORT, default 6399) and a
# private Postgres cluster (BENCH_PG_PORT, default 5499) in a temporary
# directory, so no other load shares their CPU, and then:
#
#   1. raw baselines with redis-benchmark at c=50: PING, and Guard's own
#      function by FCALL with the keys and arguments Guard sends for the
#      3-rule login check of step 3 (ip, user, device logs; 7 lock records,
#      a trust record), -P 1 and -P 16;
#   2. Redis bytes of one full 100-entry log (MEMORY USAGE);
#   3. Guard's POST /v1/check over HTTP under wrk at c=50, audit on
#      Postgres, every request a random user, IP and device;
#   4. the floor of any Go HTTP service: scripts/rawhttp (net/http reading
#      the body and answering a fixed decision-sized JSON) under the same
#      wrk load;
#
# and prints decisions/s, p50/p99, Redis CPU per decision (INFO
# commandstats and the process's CPU), Guard's and Postgres's CPU per
# decision (from /proc), and the ratios Guard / raw. With
# ENVOY_RATELIMIT_BIN set to a built envoyproxy/ratelimit binary it also
# measures that service's HTTP /json endpoint over the same Redis with a
# 3-descriptor config (see docs/performance.md). Installs redis-server,
# postgresql and wrk with apt-get when missing. Never touches the shared
# Redis or Postgres.
set -euo pipefail

cd "$(dirname "$0")/.."
GUARD_SCRIPT=bench.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh

ensure_go
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
command -v redis-benchmark >/dev/null 2>&1 || apt_install redis-tools
command -v wrk >/dev/null 2>&1 || apt_install wrk
pgbin=$(private_pg_bin)

secs=${BENCH_SECONDS:-10}
conns=${BENCH_CONNECTIONS:-50}
rport=${BENCH_REDIS_PORT:-6399}
pgport=${BENCH_PG_PORT:-5499}
gport=${BENCH_GUARD_PORT:-18089}
tick=$(getconf CLK_TCK)

work=$(mktemp -d /tmp/guard-bench.XXXXXX)
chmod 755 "$work"
guard_pid=""
envoy_pid=""
raw_pid=""
cleanup() {
	[ -n "$guard_pid" ] && kill "$guard_pid" 2>/dev/null && wait "$guard_pid" 2>/dev/null
	[ -n "$raw_pid" ] && kill "$raw_pid" 2>/dev/null
	[ -n "$envoy_pid" ] && kill "$envoy_pid" 2>/dev/null
	redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
	private_pg_stop "$pgbin" "$work/pg"
	rm -rf "$work"
}
trap cleanup EXIT

# cpu_ticks PID... prints the user+system clock ticks the processes used.
cpu_ticks() {
	local total=0 pid
	for pid in "$@"; do
		if [ -r "/proc/$pid/stat" ]; then
			# Fields after the command (which may hold spaces): utime is
			# the 12th, stime the 13th.
			set -- $(sed 's/^.*) //' "/proc/$pid/stat")
			total=$((total + ${12} + ${13}))
		fi
	done
	echo "$total"
}
pg_pids() { echo "$(head -n 1 "$work/pg/postmaster.pid") $(pgrep -P "$(head -n 1 "$work/pg/postmaster.pid")" | tr '\n' ' ')"; }
rcli() { redis-cli -p "$rport" "$@"; }
fcall_usec() { rcli info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_fcall:/ {print $7}'; }
fcall_calls() { rcli info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_fcall:/ {print $3}'; }
redis_pid() { cat "$work/redis.pid"; }
us_per() { awk -v t="$1" -v n="$2" -v hz="$tick" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }'; }

log "private Redis on 127.0.0.1:$rport, Postgres on 127.0.0.1:$pgport (in $work)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
	--pidfile "$work/redis.pid" --dir "$work" --logfile "$work/redis.log"
private_pg_start "$pgbin" "$work/pg" "$pgport"
wait_for "private Redis" sh -c "redis-cli -p $rport ping | grep -q PONG"
psql -w "postgres://postgres@127.0.0.1:$pgport/postgres" -qAtc "CREATE DATABASE guard" >/dev/null
db="postgres://postgres@127.0.0.1:$pgport/guard?sslmode=disable"

# 1. Raw baselines.
guard_fn_load "$rport"
fn=$(guard_fn)
login_call
big=1000000
n=$((secs * 20000))
# rb prints redis-benchmark's CSV line: test, rps, avg, min, p50, p95,
# p99, max (ms); field N of it by csv_field.
rb() { redis-benchmark -p "$rport" -c "$conns" -n "$n" -r 1000000 --csv "$@" | tail -n 1 | tr -d '"'; }
csv_field() { echo "$1" | cut -d, -f"$2"; }
log "redis-benchmark PING, c=$conns"
ping_p1=$(csv_field "$(rb -P 1 -t ping_mbulk)" 2)
log "redis-benchmark FCALL (3-rule login), c=$conns, -P 1 and -P 16"
rcli config resetstat >/dev/null
r0=$(cpu_ticks "$(redis_pid)")
eval_p1_csv=$(rb -P 1 fcall "$fn" "${#LOGIN_KEYS[@]}" "${LOGIN_KEYS[@]}" "${LOGIN_ARGS[@]}")
eval_p1=$(csv_field "$eval_p1_csv" 2)
r1=$(cpu_ticks "$(redis_pid)")
eval_usec=$(fcall_usec)
eval_calls=$(fcall_calls)
eval_p16=$(csv_field "$(rb -P 16 fcall "$fn" "${#LOGIN_KEYS[@]}" "${LOGIN_KEYS[@]}" "${LOGIN_ARGS[@]}")" 2)

# 2. Bytes of one full 100-entry log, key as long as Guard's.
fullkey="guard:v2:{0123456789abcdefghijklmn}l:login/user"
for _ in $(seq 100); do
	rcli fcall "$fn" 1 "$fullkey" 'check 1 0 0 0 0 0 0 64 36ee80 3600000 0 0' 1 '' >/dev/null
done
full_bytes=$(rcli memory usage "$fullkey")
rcli flushall >/dev/null

# 3. Guard over HTTP.
# BENCH_PPROF: a Guard built with -tags pprof (docs/performance.md,
# "Profiling") whose CPU profile of the measured phase lands in that file.
go build ${BENCH_PPROF:+-tags pprof} -o "$work/guard" ./cmd/guard
pprof_port=$((gport + 1))
cat >"$work/guard.yaml" <<EOF
listen: 127.0.0.1:$gport
key_secret: bench-key-secret-0123456789abcdef
api_keys:
  - {name: bench, scopes: [check], key: bench-check-key-0123456789}
actions:
  login:
    limits:
      - {dimension: ip, limit: $big, window: 1m}
      - {dimension: user, limit: $big, window: 15m}
      - {dimension: device, limit: $big, window: 1h}
    failures:
      - {dimension: user+ip, limit: 10, window: 15m}
      - {dimension: user, limit: 50, window: 24h}
    lockout: {ladder: [1m, 5m, 15m], decay: 24h, ledger: auth}
audit: {spool_dir: $work/spool, flush_interval: 200ms, batch_size: 1000}
# A budget far above any answer time, so every decision measured is one
# Redis made (none from the fallback); the run prints how many were not.
store: {budget: 1s}
EOF
GUARD_DATABASE_URL=$db "$work/guard" migrate up >/dev/null
cat >"$work/check.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-check-key-0123456789"
local counter = 0
request = function()
  counter = counter + 1
  local n = math.random(1, 1000000)
  local body = string.format(
    '{"action":"login","user":"u%d@example.com","ip":"198.%d.%d.%d","device":"d-%d"}',
    n, 18 + n % 2, math.floor(n / 256) % 256, n % 256, n)
  return wrk.format(nil, "/v1/check", nil, body)
end
EOF
GUARD_REDIS_URL="redis://127.0.0.1:$rport/0" GUARD_DATABASE_URL=$db \
	GUARD_PPROF_ADDR=${BENCH_PPROF:+127.0.0.1:$pprof_port} \
	"$work/guard" serve --config "$work/guard.yaml" --log-level warn >"$work/guard.log" 2>&1 &
guard_pid=$!
wait_for "Guard" curl -fs "http://127.0.0.1:$gport/readyz"
# Warm up connections, caches and the JIT of wrk's Lua.
wrk -t2 -c "$conns" -d2s -s "$work/check.lua" "http://127.0.0.1:$gport" >/dev/null
sleep 1
rcli config resetstat >/dev/null
degraded() { curl -fs "http://127.0.0.1:$gport/metrics" | awk '/^guard_degraded_decisions_total/ {n += $NF} END {print n + 0}'; }
deg0=$(degraded)
pg_before=$(psql -w "$db" -qAtc "SELECT count(*) FROM audit_events")
g0=$(cpu_ticks "$guard_pid"); p0=$(cpu_ticks $(pg_pids)); rr0=$(cpu_ticks "$(redis_pid)")
log "wrk POST /v1/check, c=$conns, ${secs}s"
if [ -n "${BENCH_PPROF:-}" ]; then
	curl -fs -o "$BENCH_PPROF" "http://127.0.0.1:$pprof_port/debug/pprof/profile?seconds=$((secs > 3 ? secs - 2 : 1))" &
fi
wrk -t2 -c "$conns" -d"${secs}s" --latency -s "$work/check.lua" "http://127.0.0.1:$gport" >"$work/wrk.txt"
wait_profile=${BENCH_PPROF:+1}
[ -z "$wait_profile" ] || wait $! || log "no profile written to $BENCH_PPROF"
g1=$(cpu_ticks "$guard_pid"); rr1=$(cpu_ticks "$(redis_pid)")
http_usec=$(fcall_usec)
http_calls=$(fcall_calls)
deg1=$(degraded)
# Let the audit writer drain before reading Postgres's share.
sleep 2
p1=$(cpu_ticks $(pg_pids))
pg_after=$(psql -w "$db" -qAtc "SELECT count(*) FROM audit_events")
rps=$(awk '/^Requests\/sec/ {print $2}' "$work/wrk.txt")
total=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
p50=$(awk '/^ +50%/ {print $2}' "$work/wrk.txt")
p99=$(awk '/^ +99%/ {print $2}' "$work/wrk.txt")
errors=$(awk '/Non-2xx|Socket errors/ {print}' "$work/wrk.txt")
rows=$((pg_after - pg_before))
kill "$guard_pid" && wait "$guard_pid" 2>/dev/null || true
guard_pid=""

# 4. The floor: a bare net/http server under the same load.
go build -o "$work/rawhttp" ./scripts/rawhttp
"$work/rawhttp" -listen 127.0.0.1:18093 >"$work/rawhttp.log" 2>&1 &
raw_pid=$!
wait_for "rawhttp" sh -c "curl -fs -X POST -d {} http://127.0.0.1:18093/v1/check >/dev/null"
wrk -t2 -c "$conns" -d2s -s "$work/check.lua" "http://127.0.0.1:18093" >/dev/null
h0=$(cpu_ticks "$raw_pid")
log "wrk rawhttp, c=$conns, ${secs}s"
wrk -t2 -c "$conns" -d"${secs}s" --latency -s "$work/check.lua" "http://127.0.0.1:18093" >"$work/raw.txt"
h1=$(cpu_ticks "$raw_pid")
raw_rps=$(awk '/^Requests\/sec/ {print $2}' "$work/raw.txt")
raw_total=$(awk '/requests in/ {print $1}' "$work/raw.txt")
kill "$raw_pid" 2>/dev/null || true
raw_pid=""

envoy_rps=""
if [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then
	mkdir -p "$work/envoy/config"
	cat >"$work/envoy/config/config.yaml" <<EOF
domain: bench
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: $big}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: $big}
  - key: device
    rate_limit: {unit: hour, requests_per_unit: $big}
EOF
	cat >"$work/envoy.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local n = math.random(1, 1000000)
  local body = string.format(
    '{"domain":"bench","descriptors":[{"entries":[{"key":"ip","value":"198.18.%d.%d"}]},{"entries":[{"key":"user","value":"u%d"}]},{"entries":[{"key":"device","value":"d-%d"}]}]}',
    math.floor(n / 256) % 256, n % 256, n, n)
  return wrk.format(nil, "/json", nil, body)
end
EOF
	RUNTIME_ROOT="$work/envoy" RUNTIME_SUBDIRECTORY=. RUNTIME_WATCH_ROOT=false \
		REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" USE_STATSD=false LOG_LEVEL=error \
		HOST=127.0.0.1 PORT=18090 GRPC_HOST=127.0.0.1 GRPC_PORT=18091 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18092 \
		"$ENVOY_RATELIMIT_BIN" >"$work/envoy.log" 2>&1 &
	envoy_pid=$!
	sleep 2
	wrk -t2 -c "$conns" -d2s -s "$work/envoy.lua" "http://127.0.0.1:18090" >/dev/null
	e0=$(cpu_ticks "$envoy_pid"); er0=$(cpu_ticks "$(redis_pid)")
	wrk -t2 -c "$conns" -d"${secs}s" --latency -s "$work/envoy.lua" "http://127.0.0.1:18090" >"$work/envoy.txt"
	e1=$(cpu_ticks "$envoy_pid"); er1=$(cpu_ticks "$(redis_pid)")
	envoy_rps=$(awk '/^Requests\/sec/ {print $2}' "$work/envoy.txt")
	envoy_total=$(awk '/requests in/ {print $1}' "$work/envoy.txt")
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
cat <<EOF

Guard bench ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, c=$conns, ${secs}s per phase, $(redis-server --version | awk '{print $3}'))

raw Redis
  PING                          ${ping_p1} ops/s
  FCALL 3-rule login, -P 1      ${eval_p1} decisions/s, p50/p99 $(csv_field "$eval_p1_csv" 5)ms / $(csv_field "$eval_p1_csv" 7)ms
  FCALL 3-rule login, -P 16     ${eval_p16} decisions/s
  Redis CPU per FCALL           ${eval_usec} us (commandstats), $(us_per $((r1 - r0)) "$eval_calls") us (process)
  full 100-entry log            ${full_bytes} bytes (MEMORY USAGE)

Guard POST /v1/check over HTTP, audit on Postgres
  decisions/s                   ${rps} (${total} in ${secs}s${errors:+; $errors})
  answered from the fallback    $((deg1 - deg0)) (FCALL calls: ${http_calls})
  latency p50 / p99             ${p50} / ${p99}
  Redis CPU per decision        ${http_usec} us (commandstats), $(us_per $((rr1 - rr0)) "$total") us (process)
  Guard CPU per decision        $(us_per $((g1 - g0)) "$total") us
  Postgres CPU per audit row    $(us_per $((p1 - p0)) "$rows") us (${rows} rows)

bare net/http (scripts/rawhttp), same load
  requests/s                    ${raw_rps}, p50/p99 $(awk '/^ +50%/ {print $2}' "$work/raw.txt") / $(awk '/^ +99%/ {print $2}' "$work/raw.txt")
  CPU per request               $(us_per $((h1 - h0)) "$raw_total") us

ratios
  Guard / raw FCALL -P 1        $(ratio "$rps" "$eval_p1")
  Guard / raw PING              $(ratio "$rps" "$ping_p1")
  Guard / bare net/http         $(ratio "$rps" "$raw_rps") (decisions/s), CPU per decision $(ratio "$(us_per $((g1 - g0)) "$total")" "$(us_per $((h1 - h0)) "$raw_total")")x the bare server's
EOF
if [ -n "$envoy_rps" ]; then
	cat <<EOF
  envoy ratelimit /json         ${envoy_rps} decisions/s, p50/p99 $(awk '/^ +50%/ {print $2}' "$work/envoy.txt") / $(awk '/^ +99%/ {print $2}' "$work/envoy.txt")
  envoy CPU per decision        $(us_per $((e1 - e0)) "$envoy_total") us (its process), Redis $(us_per $((er1 - er0)) "$envoy_total") us (process)
  Guard / envoy ratelimit       $(ratio "$rps" "$envoy_rps")
EOF
fi
