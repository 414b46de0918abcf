#!/usr/bin/env bash
# Measures Guard against the raw servers it stands on, in one run on one
# machine (docs/performance.md, "Decisions over HTTP"):
#
#   ./scripts/bench.sh                       # 10 s per phase, 50 connections
#   BENCH_RUNS=5 ./scripts/bench.sh          # 5 runs in turn, and medians
#   BENCH_SECONDS=20 BENCH_CONNECTIONS=100 ./scripts/bench.sh
#   BENCH_PPROF=/tmp/guard.pprof ./scripts/bench.sh   # and a CPU profile
#                                                     # of Guard in run 1
#   BENCH_GOMAXPROCS=1 ./scripts/bench.sh    # every Go server (Guard, the
#                                            # bare server, envoy's) on 1 P
#
# It starts a private Redis (port BENCH_REDIS_PORT, default 6399) and a
# private Postgres cluster (BENCH_PG_PORT, default 5499) in a temporary
# directory, so no other load shares their CPU, measures the Redis bytes
# of one full 100-entry log (MEMORY USAGE), and then runs, BENCH_RUNS
# times (default 1) one after the other:
#
#   1. raw baselines with redis-benchmark at c=50: PING, and Guard's own
#      function by FCALL with the keys and arguments Guard sends for the
#      3-rule login check of step 2 (ip, user, device logs; 7 lock records,
#      a trust record), -P 1 and -P 16;
#   2. Guard's POST /v1/check over HTTP under wrk at c=50, audit on
#      Postgres, every request a random user, IP and device;
#   3. the floor of any Go HTTP service: scripts/rawhttp (net/http reading
#      the body and answering a fixed decision-sized JSON) under the same
#      wrk load;
#   4. with ENVOY_RATELIMIT_BIN set to a built envoyproxy/ratelimit
#      binary, that service's HTTP /json endpoint over the same Redis with
#      a 3-descriptor config (see docs/performance.md) under the same load;
#
# and prints for each run decisions/s, p50/p99, Redis CPU per decision
# (INFO commandstats and the process's CPU), Guard's and Postgres's CPU per
# decision (from /proc), the machine's busy, idle and steal shares during
# each HTTP phase and the raw -P 1 call (/proc/stat), and the ratios of the
# run, marked when a phase lost 5% or more to steal, and with more than one
# run the median of every figure and of every ratio. Installs
# redis-server, postgresql and wrk with apt-get when missing. Never
# touches the shared Redis or Postgres.
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
runs=${BENCH_RUNS:-1}
conns=${BENCH_CONNECTIONS:-50}
# GOMAXPROCS of the three Go servers alike ("": the runtime's default, one
# P per core).
procs=${BENCH_GOMAXPROCS:-}
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
	# Each step whatever the one before did: a process that has died must
	# not leave the others, or the private Postgres, running.
	local pid
	for pid in "$guard_pid" "$raw_pid" "$envoy_pid"; do
		if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
	done
	if [ -n "$guard_pid" ]; then wait "$guard_pid" 2>/dev/null || true; fi
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
# sys_ticks prints the machine's clock ticks from /proc/stat's cpu line:
# "busy idle steal" (busy: user, nice, system, irq, softirq; idle: idle
# and iowait). machine_share T0 T1 prints the phase's shares of them, so a
# run says whether its processes had the cores to themselves and used them.
sys_ticks() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8, $5 + $6, $9}' /proc/stat; }
machine_share() {
	echo "$1 $2" | awk '{b = $4 - $1; i = $5 - $2; s = $6 - $3; t = b + i + s
		if (t > 0) printf "%.0f%%_busy,_%.0f%%_idle,_%.0f%%_steal", 100 * b / t, 100 * i / t, 100 * s / t; else print "n/a"}'
}
pg_pids() { echo "$(head -n 1 "$work/pg/postmaster.pid") $(pgrep -P "$(head -n 1 "$work/pg/postmaster.pid")" | tr '\n' ' ')"; }
rcli() { redis-cli -p "$rport" "$@"; }
fcall_usec() { rcli info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_fcall:/ {print $7}'; }
fcall_calls() { rcli info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_fcall:/ {print $3}'; }
redis_pid() { cat "$work/redis.pid"; }
# redis_reads prints how many reads of its clients' sockets Redis has
# served since the last CONFIG RESETSTAT: FCALL calls over it is how many
# decisions shared each round trip.
redis_reads() { rcli info stats | tr -d '\r' | awk -F: '$1 == "total_reads_processed" {print $2}'; }
us_per() { awk -v t="$1" -v n="$2" -v hz="$tick" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }'; }

log "private Redis on 127.0.0.1:$rport, Postgres on 127.0.0.1:$pgport (in $work)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
	--pidfile "$work/redis.pid" --dir "$work" --logfile "$work/redis.log"
private_pg_start "$pgbin" "$work/pg" "$pgport"
wait_for "private Redis" sh -c "redis-cli -p $rport ping | grep -q PONG"
psql -w "postgres://postgres@127.0.0.1:$pgport/postgres" -qAtc "CREATE DATABASE guard" >/dev/null
db="postgres://postgres@127.0.0.1:$pgport/guard?sslmode=disable"

# Everything below runs in the private servers only.
guard_fn_load "$rport"
fn=$(guard_fn)
login_call
big=1000000
n=$((secs * 20000))
# rb prints redis-benchmark's CSV line: test, rps, avg, min, p50, p95,
# p99, max (ms); field N of it by csv_field.
rb() { redis-benchmark -p "$rport" -c "$conns" -n "$n" -r 1000000 --csv "$@" | tail -n 1 | tr -d '"'; }
csv_field() { echo "$1" | cut -d, -f"$2"; }
rb_login() { rb "$@" fcall "$fn" "${#LOGIN_KEYS[@]}" "${LOGIN_KEYS[@]}" "${LOGIN_ARGS[@]}"; }

# Bytes of one full 100-entry log, key as long as Guard's (once).
fullkey="guard:v2:{0123456789abcdefghijklmn}l:login/user"
for _ in $(seq 100); do
	rcli fcall "$fn" 1 "$fullkey" 'check 1 0 0 0 0 0 0 0 64 36ee80 3600000 0 0' 1 '' >/dev/null
done
full_bytes=$(rcli memory usage "$fullkey")
rcli flushall >/dev/null

# Guard, the bare server and envoy's ratelimit are built, started and
# warmed up once; each run measures them in turn.
# BENCH_PPROF: a Guard built with -tags pprof (docs/performance.md,
# "Profiling") whose CPU profile of the first run's Guard phase lands in
# that file.
go build ${BENCH_PPROF:+-tags pprof} -o "$work/guard" ./cmd/guard
pprof_port=$((gport + 5)) # past envoy (18090-18092) and rawhttp (18093)
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
	GUARD_PPROF_ADDR=${BENCH_PPROF:+127.0.0.1:$pprof_port} GOMAXPROCS=$procs \
	"$work/guard" serve --config "$work/guard.yaml" --log-level warn >"$work/guard.log" 2>&1 &
guard_pid=$!
wait_for "Guard" curl -fs "http://127.0.0.1:$gport/readyz"
# Warm up connections, caches and the JIT of wrk's Lua.
wrk -t2 -c "$conns" -d2s -s "$work/check.lua" "http://127.0.0.1:$gport" >/dev/null

go build -o "$work/rawhttp" ./scripts/rawhttp
GOMAXPROCS=$procs "$work/rawhttp" -listen 127.0.0.1:18093 >"$work/rawhttp.log" 2>&1 &
raw_pid=$!
wait_for "rawhttp" sh -c "curl -fs -X POST -d {} http://127.0.0.1:18093/v1/check >/dev/null"
wrk -t2 -c "$conns" -d2s -s "$work/check.lua" "http://127.0.0.1:18093" >/dev/null

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
		GOMAXPROCS=$procs "$ENVOY_RATELIMIT_BIN" >"$work/envoy.log" 2>&1 &
	envoy_pid=$!
	envoy_body='{"domain":"bench","descriptors":[{"entries":[{"key":"ip","value":"198.18.0.1"}]}]}'
	if ! wait_for "envoy ratelimit" sh -c "curl -fs -d '$envoy_body' http://127.0.0.1:18090/json"; then
		cat "$work/envoy.log" >&2
		exit 1
	fi
	wrk -t2 -c "$conns" -d2s -s "$work/envoy.lua" "http://127.0.0.1:18090" >/dev/null
fi

# Each run's figures go to $results as "run name value"; get reads one
# back, median gives a name's median over the runs.
results="$work/results"
: >"$results"
put() { echo "$run $1 ${2:-n/a}" >>"$results"; }
get() { awk -v r="$1" -v k="$2" '$1 == r && $2 == k {print $3}' "$results"; }
median() {
	awk -v k="$1" '$2 == k && $3 != "n/a" {print $3}' "$results" | sort -g |
		awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# to_ms reads a wrk duration (850.00us, 3.63ms, 1.02s) and prints it in ms.
to_ms() {
	awk '{v = $1 + 0; if ($1 ~ /us$/) v /= 1000; else if ($1 ~ /[0-9]s$/ && $1 !~ /ms$/) v *= 1000; else if ($1 ~ /m$/) v *= 60000; printf "%.2f\n", v}'
}
# wrk_field FILE rps|total|p50|p99 (latencies in ms)
wrk_field() {
	case $2 in
	errors) awk '/^  Non-2xx|^  Socket errors/ {print; n++} END {exit n == 0}' "$1" ;;
	rps) awk '/^Requests\/sec/ {print $2}' "$1" ;;
	total) awk '/requests in/ {print $1}' "$1" ;;
	p50 | p99) awk -v p="${2#p}%" '$1 == p {print $2}' "$1" | to_ms ;;
	esac
}
# wrk_ok FILE WHAT stops the bench when wrk counted failed requests in FILE:
# those would be figures of errors, not of decisions.
wrk_ok() {
	if wrk_field "$1" errors >&2; then
		log "$2: wrk counted failed requests (above); no figures"
		exit 1
	fi
}
degraded() { curl -fs "http://127.0.0.1:$gport/metrics" | awk '/^guard_degraded_decisions_total/ {n += $NF} END {print n + 0}'; }
audit_rows() { psql -w "$db" -qAtc "SELECT count(*) FROM audit_events"; }

# 1. Raw baselines: PING; Guard's function by FCALL, -P 1 and -P 16.
raw_phase() {
	local r0 r1 m0 csv
	log "run $run: redis-benchmark PING and FCALL (3-rule login), c=$conns"
	rcli flushall >/dev/null
	put ping "$(csv_field "$(rb -P 1 -t ping_mbulk)" 2)"
	rcli flushall >/dev/null
	rcli config resetstat >/dev/null
	r0=$(cpu_ticks "$(redis_pid)")
	m0=$(sys_ticks)
	csv=$(rb_login -P 1)
	put fcall_machine "$(machine_share "$m0" "$(sys_ticks)")"
	r1=$(cpu_ticks "$(redis_pid)")
	put fcall "$(csv_field "$csv" 2)"
	put fcall_p50 "$(csv_field "$csv" 5)"
	put fcall_p99 "$(csv_field "$csv" 7)"
	put fcall_usec "$(fcall_usec)"
	put fcall_cpu "$(us_per $((r1 - r0)) "$(fcall_calls)")"
	rcli flushall >/dev/null
	put fcall_p16 "$(csv_field "$(rb_login -P 16)" 2)"
	rcli flushall >/dev/null
}

# 2. Guard over HTTP, audit on Postgres.
guard_phase() {
	local g0 g1 p0 p1 rr0 rr1 m0 deg0 rows0 total
	# Every run starts from an empty Redis and an empty audit trail (the
	# writer has drained the last run's): a growing table makes each
	# run's rows dearer than the last's.
	rcli flushall >/dev/null
	psql -w "$db" -qAtc "TRUNCATE audit_events" >/dev/null
	sleep 1
	rcli config resetstat >/dev/null
	deg0=$(degraded)
	rows0=$(audit_rows)
	g0=$(cpu_ticks "$guard_pid"); p0=$(cpu_ticks $(pg_pids)); rr0=$(cpu_ticks "$(redis_pid)")
	m0=$(sys_ticks)
	log "run $run: wrk POST /v1/check, c=$conns, ${secs}s"
	if [ -n "${BENCH_PPROF:-}" ] && [ "$run" = 1 ]; then
		curl -fs -o "$BENCH_PPROF" "http://127.0.0.1:$pprof_port/debug/pprof/profile?seconds=$((secs > 3 ? secs - 2 : 1))" &
		profile_pid=$!
	fi
	wrk -t2 -c "$conns" -d"${secs}s" --latency -s "$work/check.lua" "http://127.0.0.1:$gport" >"$work/wrk.txt"
	wrk_ok "$work/wrk.txt" "Guard"
	if [ -n "${profile_pid:-}" ]; then
		wait "$profile_pid" || log "no profile written to $BENCH_PPROF"
		profile_pid=""
	fi
	g1=$(cpu_ticks "$guard_pid"); rr1=$(cpu_ticks "$(redis_pid)")
	put guard_machine "$(machine_share "$m0" "$(sys_ticks)")"
	total=$(wrk_field "$work/wrk.txt" total)
	put guard "$(wrk_field "$work/wrk.txt" rps)"
	put guard_total "$total"
	put guard_p50 "$(wrk_field "$work/wrk.txt" p50)"
	put guard_p99 "$(wrk_field "$work/wrk.txt" p99)"
	put guard_errors "$(awk '/Non-2xx|Socket errors/ {printf "%s; ", $0}' "$work/wrk.txt" | tr ' ' '_')"
	put guard_usec "$(fcall_usec)"
	put guard_calls "$(fcall_calls)"
	put guard_batch "$(ratio "$(fcall_calls)" "$(redis_reads)")"
	put guard_redis_cpu "$(us_per $((rr1 - rr0)) "$total")"
	put guard_cpu "$(us_per $((g1 - g0)) "$total")"
	put guard_degraded $(($(degraded) - deg0))
	# Let the audit writer drain before reading Postgres's share.
	sleep 2
	p1=$(cpu_ticks $(pg_pids))
	local rows=$(($(audit_rows) - rows0))
	put pg_rows "$rows"
	put pg_cpu "$(us_per $((p1 - p0)) "$rows")"
}

# 3. The floor of any Go HTTP service: a bare net/http server under the
# same load.
rawhttp_phase() {
	local h0 h1 m0
	h0=$(cpu_ticks "$raw_pid"); m0=$(sys_ticks)
	log "run $run: wrk rawhttp, c=$conns, ${secs}s"
	wrk -t2 -c "$conns" -d"${secs}s" --latency -s "$work/check.lua" "http://127.0.0.1:18093" >"$work/raw.txt"
	wrk_ok "$work/raw.txt" "rawhttp"
	h1=$(cpu_ticks "$raw_pid")
	put http_machine "$(machine_share "$m0" "$(sys_ticks)")"
	put http "$(wrk_field "$work/raw.txt" rps)"
	put http_p50 "$(wrk_field "$work/raw.txt" p50)"
	put http_p99 "$(wrk_field "$work/raw.txt" p99)"
	put http_cpu "$(us_per $((h1 - h0)) "$(wrk_field "$work/raw.txt" total)")"
}

# 4. envoy's ratelimit on the same Redis.
envoy_phase() {
	local e0 e1 er0 er1 m0 total
	rcli flushall >/dev/null
	e0=$(cpu_ticks "$envoy_pid"); er0=$(cpu_ticks "$(redis_pid)"); m0=$(sys_ticks)
	log "run $run: wrk envoy ratelimit /json, c=$conns, ${secs}s"
	wrk -t2 -c "$conns" -d"${secs}s" --latency -s "$work/envoy.lua" "http://127.0.0.1:18090" >"$work/envoy.txt"
	wrk_ok "$work/envoy.txt" "envoy ratelimit"
	e1=$(cpu_ticks "$envoy_pid"); er1=$(cpu_ticks "$(redis_pid)")
	put envoy_machine "$(machine_share "$m0" "$(sys_ticks)")"
	total=$(wrk_field "$work/envoy.txt" total)
	put envoy "$(wrk_field "$work/envoy.txt" rps)"
	put envoy_p50 "$(wrk_field "$work/envoy.txt" p50)"
	put envoy_p99 "$(wrk_field "$work/envoy.txt" p99)"
	put envoy_cpu "$(us_per $((e1 - e0)) "$total")"
	put envoy_redis_cpu "$(us_per $((er1 - er0)) "$total")"
}

# The ratios of one run, from its own figures.
ratios() {
	put r_raw "$(ratio "$(get "$run" guard)" "$(get "$run" fcall)")"
	put r_ping "$(ratio "$(get "$run" guard)" "$(get "$run" ping)")"
	put r_http "$(ratio "$(get "$run" guard)" "$(get "$run" http)")"
	put r_http_cpu "$(ratio "$(get "$run" guard_cpu)" "$(get "$run" http_cpu)")"
	if [ -n "$envoy_pid" ]; then
		put r_envoy "$(ratio "$(get "$run" guard)" "$(get "$run" envoy)")"
		put r_envoy_redis "$(ratio "$(get "$run" guard_redis_cpu)" "$(get "$run" envoy_redis_cpu)")"
	fi
}

# stolen R prints, for a run whose phases lost 5% or more of the machine
# to steal (other guests of the host), which phases and how much: the
# ratios compare phases, so one stolen phase skews them.
stolen() {
	local phase share steal out=""
	[ "$1" != median ] || return 0
	for phase in fcall guard http envoy; do
		share=$(get "$1" "${phase}_machine")
		steal=$(echo "$share" | sed -n 's/.*_\([0-9]*\)%_steal$/\1/p')
		if [ -n "$steal" ] && [ "$steal" -ge 5 ]; then out="$out $phase ${steal}%"; fi
	done
	[ -z "$out" ] || printf ' (steal in the phases:%s; these ratios say more about the host than about Guard)' "$out"
}

# report R prints run R's figures, or with R = median the medians of
# every figure over the runs (each ratio the median of the runs' ratios).
report() {
	local r=$1
	v() { if [ "$r" = median ]; then median "$1"; else get "$r" "$1"; fi; }
	# m prints a phase's machine shares (a run's only: they have no median).
	m() { if [ "$r" = median ]; then echo "(see the runs)"; else get "$r" "$1" | tr '_' ' '; fi; }
	cat <<EOF

raw Redis
  PING                          $(v ping) ops/s
  FCALL 3-rule login, -P 1      $(v fcall) decisions/s, p50/p99 $(v fcall_p50) / $(v fcall_p99) ms
  FCALL 3-rule login, -P 16     $(v fcall_p16) decisions/s
  Redis CPU per FCALL           $(v fcall_usec) us (commandstats), $(v fcall_cpu) us (process)
  the machine meanwhile (-P 1)  $(m fcall_machine)
  full 100-entry log            ${full_bytes} bytes (MEMORY USAGE)

Guard POST /v1/check over HTTP, audit on Postgres
  decisions/s                   $(v guard) ($(v guard_total) in ${secs}s$(e=$(v guard_errors); [ "$r" = median ] || [ "$e" = n/a ] || echo "; $e" | tr '_' ' '))
  answered from the fallback    $(v guard_degraded) (FCALL calls: $(v guard_calls))
  decisions per Redis read      $(v guard_batch) (round trips shared by the batcher)
  latency p50 / p99             $(v guard_p50) / $(v guard_p99) ms
  Redis CPU per decision        $(v guard_usec) us (commandstats), $(v guard_redis_cpu) us (process)
  Guard CPU per decision        $(v guard_cpu) us
  Postgres CPU per audit row    $(v pg_cpu) us ($(v pg_rows) rows)
  the machine meanwhile         $(m guard_machine)

bare net/http (scripts/rawhttp), same load
  requests/s                    $(v http), p50/p99 $(v http_p50) / $(v http_p99) ms
  CPU per request               $(v http_cpu) us
  the machine meanwhile         $(m http_machine)

ratios$(stolen "$r")
  Guard / raw FCALL -P 1        $(v r_raw)
  Guard / raw PING              $(v r_ping)
  Guard / bare net/http         $(v r_http) (decisions/s), CPU per decision $(v r_http_cpu)x the bare server's
EOF
	if [ -n "$envoy_pid" ]; then
		cat <<EOF
  envoy ratelimit /json         $(v envoy) decisions/s, p50/p99 $(v envoy_p50) / $(v envoy_p99) ms
  envoy CPU per decision        $(v envoy_cpu) us (its process), Redis $(v envoy_redis_cpu) us (process)
  envoy: the machine meanwhile  $(m envoy_machine)
  Guard / envoy ratelimit       $(v r_envoy) (decisions/s); Redis CPU per decision $(v r_envoy_redis)x envoy's
EOF
	fi
}

for run in $(seq "$runs"); do
	raw_phase
	guard_phase
	rawhttp_phase
	[ -z "$envoy_pid" ] || envoy_phase
	ratios
done

echo
echo "Guard bench ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, c=$conns, ${secs}s per phase, $runs run(s), GOMAXPROCS ${procs:-default}, $(redis-server --version | awk '{print $3}'))"
for run in $(seq "$runs"); do
	[ "$runs" = 1 ] || printf '\n--- run %s of %s\n' "$run" "$runs"
	report "$run"
done
if [ "$runs" -gt 1 ]; then
	printf '\n--- median of the %s runs\n' "$runs"
	report median
fi
