# Shared by scripts/test.sh and scripts/serve.sh (sourced, not run): make
# sure a local Redis (127.0.0.1:6379) and Postgres (127.0.0.1:5432) answer,
# reusing running servers and otherwise installing (apt-get) and starting
# them. Never stops, restarts or flushes a server that was already running.
# After ensure_postgres, PG_ADMIN_URL connects as the postgres role.

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
		return 0
	fi
	if ! command -v redis-server >/dev/null 2>&1; then
		apt_install redis-server
	fi
	log "starting redis-server on 127.0.0.1:6379 (no persistence)"
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
	wait_for "Redis" sh -c 'redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG'
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q; }

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
		if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
			apt_install postgresql
		fi
		local version
		version=$(ls /etc/postgresql | sort -V | tail -n 1)
		if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$version main"; then
			log "creating Postgres $version cluster main"
			as_root pg_createcluster "$version" main >/dev/null
		fi
		log "starting Postgres $version (cluster main)"
		as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
		wait_for "Postgres" pg_up
	fi
	# The tests connect over TCP. A fresh Debian cluster wants a password
	# there (scram-sha-256); when passwordless TCP logins are refused, create
	# (or refresh) a dedicated guard_test role with a password through the
	# local socket (peer auth) and pass it to the tests in the URL. The
	# postgres role is left alone.
	if psql "$PG_ADMIN_URL" -qAtc 'select 1' >/dev/null 2>&1; then
		return 0
	fi
	local password=${GUARD_TEST_PG_PASSWORD:-guard-test}
	log "Postgres refuses passwordless TCP logins; using a guard_test role with a password"
	as_postgres psql -qAt -v ON_ERROR_STOP=1 -v pw="$password" >/dev/null <<'SQL'
SELECT format('CREATE ROLE guard_test LOGIN CREATEDB PASSWORD %L', :'pw')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'guard_test') \gexec
SELECT format('ALTER ROLE guard_test LOGIN CREATEDB PASSWORD %L', :'pw') \gexec
SQL
	PG_ADMIN_URL="postgres://guard_test:${password}@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"
	export GUARD_TEST_DATABASE_URL=$PG_ADMIN_URL
	if ! psql "$PG_ADMIN_URL" -qAtc 'select 1' >/dev/null 2>&1; then
		log "cannot connect to Postgres over TCP as guard_test; set GUARD_TEST_DATABASE_URL"
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
