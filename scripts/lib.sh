# Shared by scripts/test.sh and scripts/serve.sh (sourced, not run): make
# sure a local Redis (127.0.0.1:6379) and Postgres (127.0.0.1:5432) answer,
# reusing running servers and otherwise installing (apt-get) and starting
# them. Never stops, restarts or flushes a server that was already running.
# After ensure_postgres, PG_ADMIN_URL connects as the postgres role.

GUARD_ROOT=${GUARD_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

log() { printf '%s: %s\n' "${GUARD_SCRIPT:-guard}" "$*" >&2; }

# as_root runs a command as root: directly when we are root, else via sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		log "need root (or sudo) to run: $*"
		return 1
	fi
}

# as_postgres runs a command as the postgres OS user.
as_postgres() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		sudo -u postgres "$@"
	fi
}

apt_updated=""
apt_install() {
	if ! command -v apt-get >/dev/null 2>&1; then
		log "apt-get not found: install $* yourself, or set GUARD_TEST_REDIS_URL / GUARD_TEST_DATABASE_URL"
		return 1
	fi
	if [ -z "$apt_updated" ]; then
		log "apt-get update"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	log "installing $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# wait_for_quiet runs a probe until it succeeds, for at most SECONDS s, and
# says nothing: the caller explains a failure.
wait_for_quiet() {
	local seconds=$1
	shift
	for _ in $(seq 1 $((seconds * 2))); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	return 1
}

# wait_for runs a probe until it succeeds, for at most 30 s.
wait_for() {
	local what=$1
	shift
	for _ in $(seq 1 60); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	log "$what did not come up within 30 s"
	return 1
}

ensure_redis() {
	if [ -n "${GUARD_TEST_REDIS_URL:-}" ]; then
		log "using Redis at GUARD_TEST_REDIS_URL"
		return 0
	fi
	if command -v redis-cli >/dev/null 2>&1 && redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
		log "Redis is running on 127.0.0.1:6379; reusing it"
		redis_7_or_later
		return
	fi
	if ! command -v redis-server >/dev/null 2>&1; then
		apt_install redis-server
	fi
	# A daemonized Redis writes a pid file even when none is configured, by
	# default /run/redis.pid, which is where a system Redis keeps its own:
	# ours and its log go under the checkout's tmp/ (gitignored).
	mkdir -p "$GUARD_ROOT/tmp"
	log "starting redis-server on 127.0.0.1:6379 (no persistence; pid and log in tmp/)"
	if ! redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
		--dir "$GUARD_ROOT/tmp" --pidfile "$GUARD_ROOT/tmp/redis-test.pid" \
		--logfile "$GUARD_ROOT/tmp/redis-test.log" >/dev/null; then
		log "redis-server did not start (see tmp/redis-test.log)"
		return 1
	fi
	wait_for "Redis" sh -c 'redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG'
	redis_7_or_later
}

# redis_7_or_later fails, saying why, when the Redis on 127.0.0.1:6379 is
# older than 7: Guard's limits are a Redis function library (FUNCTION,
# FCALL), which every Redis test would otherwise fail on one by one.
redis_7_or_later() {
	local v
	v=$(redis-cli -h 127.0.0.1 -p 6379 info server 2>/dev/null | tr -d '\r' | awk -F: '$1 == "redis_version" {print $2}')
	case ${v%%.*} in
	'' | *[!0-9]*) return 0 ;; # not told: the tests will say
	esac
	if [ "${v%%.*}" -lt 7 ]; then
		log "the Redis on 127.0.0.1:6379 is $v; Guard needs Redis 7 or later (functions): upgrade it, or set GUARD_TEST_REDIS_URL to a Redis 7"
		return 1
	fi
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q; }

# pg_psql runs psql without ever prompting for a password (-w): a refused
# login is an error to report, not a prompt that hangs a terminal.
pg_psql() { psql -w "$@"; }

# pg_server_version prints the newest Postgres server version installed
# (a directory of /usr/lib/postgresql with a postgres binary), or nothing.
pg_server_version() {
	local v
	for v in $(ls /usr/lib/postgresql 2>/dev/null | sort -V -r); do
		if [ -x "/usr/lib/postgresql/$v/bin/postgres" ]; then
			printf '%s\n' "$v"
			return 0
		fi
	done
}

# pg_cluster_line prints pg_lsclusters' line for VERSION main (columns: Ver
# Cluster Port Status Owner Data-directory Log-file), or nothing.
pg_cluster_line() { pg_lsclusters -h 2>/dev/null | awk -v v="$1" '$1 == v && $2 == "main"'; }

# pg_not_answering explains a cluster that runs but does not answer on
# 127.0.0.1:5432: another port, or listen_addresses without 127.0.0.1.
pg_not_answering() {
	local version=$1 line port listen
	line=$(pg_cluster_line "$version")
	port=$(printf '%s\n' "$line" | awk '{print $3}')
	listen=$(as_postgres psql -w -p "${port:-5432}" -qAtc 'SHOW listen_addresses' 2>/dev/null || true)
	log "Postgres $version (cluster main) is running but does not answer on 127.0.0.1:5432" \
		"(cluster port ${port:-unknown}, listen_addresses '${listen:-unknown}'):" \
		"make it listen on 127.0.0.1:5432 (postgresql.conf: port, listen_addresses)," \
		"or set GUARD_TEST_DATABASE_URL to where it answers"
}

ensure_postgres() {
	if [ -n "${GUARD_TEST_DATABASE_URL:-}" ]; then
		log "using Postgres at GUARD_TEST_DATABASE_URL"
		PG_ADMIN_URL=$GUARD_TEST_DATABASE_URL
		return 0
	fi
	PG_ADMIN_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
	if command -v pg_isready >/dev/null 2>&1 && pg_up; then
		log "Postgres is running on 127.0.0.1:5432; reusing it"
	else
		local version line out
		version=$(pg_server_version)
		if [ -z "$version" ] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
			apt_install postgresql
			version=$(pg_server_version)
		fi
		if [ -z "$version" ]; then
			log "no Postgres server is installed under /usr/lib/postgresql after installing the postgresql package;" \
				"install postgresql-NN yourself, or set GUARD_TEST_DATABASE_URL"
			return 1
		fi
		line=$(pg_cluster_line "$version")
		if [ -z "$line" ]; then
			# The package is installed without a cluster (deleted, or
			# create_main_cluster = false in /etc/postgresql-common).
			log "Postgres $version is installed without a cluster; creating cluster main on port 5432"
			if ! out=$(as_root pg_createcluster --port 5432 "$version" main 2>&1); then
				log "pg_createcluster $version main failed:"
				printf '%s\n' "$out" >&2
				return 1
			fi
			line=$(pg_cluster_line "$version")
		fi
		case $(printf '%s\n' "$line" | awk '{print $4}') in
		online*)
			# Running, yet pg_isready on 127.0.0.1:5432 failed above: give it
			# a moment (it may be starting), then say exactly what is wrong.
			if ! wait_for_quiet 10 pg_up; then
				pg_not_answering "$version"
				return 1
			fi
			;;
		*)
			log "starting Postgres $version (cluster main)"
			if ! out=$(as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>&1); then
				log "pg_ctlcluster $version main start failed:"
				printf '%s\n' "$out" >&2
				return 1
			fi
			if ! wait_for_quiet 30 pg_up; then
				if [ -n "$(pg_cluster_line "$version" | awk '$4 ~ /^online/')" ]; then
					pg_not_answering "$version"
				else
					log "Postgres $version (cluster main) started but is not running; its log:" \
						"$(pg_cluster_line "$version" | awk '{print $7}')"
				fi
				return 1
			fi
			;;
		esac
	fi
	# The tests connect over TCP. A fresh Debian cluster wants a password
	# there (scram-sha-256); when passwordless TCP logins are refused, create
	# (or refresh) a dedicated guard_test role with a password through the
	# local socket (peer auth) and pass it to the tests in the URL. The
	# postgres role is left alone; the guard_test role stays afterwards.
	if pg_psql "$PG_ADMIN_URL" -qAtc 'select 1' >/dev/null 2>&1; then
		return 0
	fi
	local password=${GUARD_TEST_PG_PASSWORD:-guard-test}
	log "Postgres refuses passwordless TCP logins; using (and leaving) a guard_test role with a password"
	as_postgres psql -w -qAt -v ON_ERROR_STOP=1 -v pw="$password" >/dev/null <<'SQL'
SELECT format('CREATE ROLE guard_test LOGIN CREATEDB PASSWORD %L', :'pw')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'guard_test') \gexec
SELECT format('ALTER ROLE guard_test LOGIN CREATEDB PASSWORD %L', :'pw') \gexec
SQL
	PG_ADMIN_URL="postgres://guard_test:${password}@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
	export GUARD_TEST_DATABASE_URL=$PG_ADMIN_URL
	if ! out=$(pg_psql "$PG_ADMIN_URL" -qAtc 'select 1' 2>&1); then
		log "cannot connect to Postgres over TCP as guard_test ($out); set GUARD_TEST_DATABASE_URL"
		return 1
	fi
}

# ensure_go puts the Go toolchain on PATH (CI may not have /usr/local/go/bin).
ensure_go() {
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	if ! command -v go >/dev/null 2>&1; then
		log "go is not installed (Go 1.26 or newer is needed: https://go.dev/doc/install)"
		return 1
	fi
}

# ensure_cgo makes sure go test -race can build: the race detector needs
# cgo, and cgo a C compiler, which a fresh Debian (and Go from go.dev) does
# not bring. Installs gcc when it is missing, and says so.
ensure_cgo() {
	local cc
	cc=$(go env CC)
	if command -v "${cc%% *}" >/dev/null 2>&1; then
		if [ "$(go env CGO_ENABLED)" != "1" ]; then
			log "CGO_ENABLED is $(go env CGO_ENABLED); -race needs cgo: unset it or set CGO_ENABLED=1"
			return 1
		fi
		return 0
	fi
	log "go test -race needs cgo, and cgo a C compiler: '${cc%% *}' is not installed, installing gcc"
	apt_install gcc libc6-dev
	if ! command -v "${cc%% *}" >/dev/null 2>&1; then
		log "still no C compiler '${cc%% *}' after installing gcc; install one, or set CC"
		return 1
	fi
}

# ensure_chromium makes headless Chromium available to the review pages'
# browser tests (internal/api, chromedp): Debian's chromium, installed with
# apt-get when none is on PATH. GUARD_CHROMIUM names another binary.
ensure_chromium() {
	if [ -n "${GUARD_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 ||
		command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then
		return 0
	fi
	log "installing chromium for the browser tests"
	apt_install chromium
}

# guard_fn prints the name of Guard's Redis function library as
# internal/limits/redis_func.go names it: guard_<first 16 hex digits of the
# SHA-1 of internal/limits/redis.lua>. Run from the repository root.
guard_fn() { echo "guard_$(sha1sum internal/limits/redis.lua | cut -c1-16)"; }

# guard_fn_load PORT loads the library into the Redis on 127.0.0.1:PORT as
# Guard does (redis_func.go), for benchmarks that call it directly.
guard_fn_load() {
	local fn
	fn=$(guard_fn)
	{
		printf '#!lua name=%s\n' "$fn"
		cat internal/limits/redis.lua
		printf "\nredis.register_function('%s', run)\n" "$fn"
	} | redis-cli -p "$1" -x function load replace >/dev/null
}

# login_call sets LOGIN_KEYS and LOGIN_ARGS to the keys and arguments Guard
# sends for the login check of scripts/bench.sh's policy (read off MONITOR),
# each identity __rand_int__ for redis-benchmark -r: 3 logs, then per
# dimension present its struck lock record (user, user+ip: the failure
# dimensions) and its manual-lockout record (all 5; pairs 22 marks the two
# that follow their struck record), the trust record. The arguments are the
# spec (redis.lua's header), then the cost and the flags ('': none set),
# then the call's deadline on Redis's clock ('~' and hexadecimal ms, as
# internal/limits/redis_late.go sends it; here one that never passes).
# Numbers are hexadecimal, the rules' keeps decimal: limit 1000000 =
# f4240, windows 1 min, 15 min, 1 h.
login_call() {
	local u='guard:v2:{u__rand_int__}' ip='guard:v2:{ip__rand_int__}' d='guard:v2:{d__rand_int__}'
	LOGIN_KEYS=("${ip}l:login/ip" "${u}l:login/user" "${d}l:login/device"
		"${u}k:auth:user" "${u}k:auth:user!m" "${ip}k:auth:ip!m" "${d}k:auth:device!m"
		"${u}k:auth:user+ip:x__rand_int__" "${u}k:auth:user+ip!m:x__rand_int__"
		"${u}k:auth:user+device!m:y__rand_int__"
		"${u}t:y__rand_int__")
	LOGIN_ARGS=('check 3 7 1 0 0 1 22 0 f4240 ea60 60000 0 f4240 dbba0 900000 0 f4240 36ee80 3600000 0 0' 1 '' '~ffffffffffff')
}

# report_call sets REPORT_KEYS and REPORT_ARGS to a failed login's report
# under the same policy (read off MONITOR): the 7 lock records and the trust
# record, then per failure rule (user+ip 10 in 15 min, user 50 in 24 h) its
# log, its lock record and its lockout index keys; the ladder 1, 5, 15 min,
# decay 24 h, and the deadline as for login_call. A new identity's
# failure strikes nothing.
report_call() {
	local u='guard:v2:{u__rand_int__}' ip='guard:v2:{ip__rand_int__}' d='guard:v2:{d__rand_int__}'
	REPORT_KEYS=("${u}k:auth:user" "${u}k:auth:user!m" "${ip}k:auth:ip!m" "${d}k:auth:device!m"
		"${u}k:auth:user+ip:x__rand_int__" "${u}k:auth:user+ip!m:x__rand_int__"
		"${u}k:auth:user+device!m:y__rand_int__"
		"${u}t:y__rand_int__"
		"${u}f:login/user+ip/failures:x__rand_int__" "${u}k:auth:user+ip:x__rand_int__" "${u}x" "${ip}x"
		"${u}f:login/user/failures" "${u}k:auth:user" "${u}x")
	REPORT_ARGS=('report 7 1 1 0 0 2 5265c00 3 ea60 493e0 dbba0 a dbba0 900000 2 0 32 5265c00 86400000 1 0 1 22 0'
		'auth|user+ip|u|ip|' '' 'auth|user|u||' '' '~ffffffffffff')
}

# private_pg_bin prints the newest installed Postgres's bin directory,
# installing postgresql with apt-get when there is none.
private_pg_bin() {
	local bin
	bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$bin" ]; then
		apt_install postgresql >&2
		bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	fi
	echo "$bin"
}

# private_pg_start BIN DIR PORT makes a new cluster in DIR (trust auth,
# user postgres) and starts it on 127.0.0.1:PORT, for benchmarks that must
# not share the machine's Postgres; private_pg_stop BIN DIR stops it.
private_pg_start() {
	mkdir "$2" && chown postgres "$2" 2>/dev/null || true
	as_postgres "$1/initdb" -D "$2" -A trust -U postgres >/dev/null
	as_postgres "$1/pg_ctl" -D "$2" -l "$2/log" -w \
		-o "-p $3 -k $2 -c listen_addresses=127.0.0.1" start >/dev/null
}
private_pg_stop() {
	if [ -f "$2/postmaster.pid" ]; then
		as_postgres "$1/pg_ctl" -D "$2" -m fast stop >/dev/null 2>&1 || true
	fi
}
