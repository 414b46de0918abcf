#!/usr/bin/env bash
# Runs Guard locally against a real Redis and Postgres, as production would:
#
#   ./scripts/serve.sh                  # go run ./cmd/guard serve
#   ./scripts/serve.sh --log-format json
#
# Redis and Postgres are reused or installed and started as scripts/test.sh
# does; the `guard` database is created when missing and migrated at start.
# GUARD_REDIS_URL and GUARD_DATABASE_URL name other servers instead: those
# are used as they are (the database still migrated at start).
# The config is scripts/dev.yaml (override with GUARD_CONFIG); the key
# secret is generated once into tmp/dev-key-secret (override with
# GUARD_KEY_SECRET) and the audit spool is tmp/spool (override with
# GUARD_SPOOL_DIR). Extra arguments go to `guard serve`. Ctrl-C stops Guard
# gracefully; Redis and Postgres keep running.
set -euo pipefail

cd "$(dirname "$0")/.."
GUARD_SCRIPT=serve.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh

ensure_go
# A Redis or database named by GUARD_REDIS_URL or GUARD_DATABASE_URL is
# used as it is: nothing local is installed, started or created for it.
if [ -z "${GUARD_REDIS_URL:-}" ]; then
	ensure_redis
fi
if [ -z "${GUARD_DATABASE_URL:-}" ]; then
	ensure_postgres
	if [ "$(pg_psql "$PG_ADMIN_URL" -qAtc "SELECT 1 FROM pg_database WHERE datname = 'guard'")" != "1" ]; then
		log "creating database guard"
		pg_psql "$PG_ADMIN_URL" -qAtc "CREATE DATABASE guard" >/dev/null
	fi
	GUARD_DATABASE_URL=$(printf '%s' "$PG_ADMIN_URL" | sed -E 's#/postgres(\?|$)#/guard\1#')
fi

if [ -z "${GUARD_KEY_SECRET:-}" ]; then
	mkdir -p tmp
	if [ ! -s tmp/dev-key-secret ]; then
		log "generating tmp/dev-key-secret"
		(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >tmp/dev-key-secret)
	fi
	GUARD_KEY_SECRET=$(cat tmp/dev-key-secret)
fi

export GUARD_CONFIG=${GUARD_CONFIG:-scripts/dev.yaml}
export GUARD_REDIS_URL=${GUARD_REDIS_URL:-redis://127.0.0.1:6379/0}
export GUARD_DATABASE_URL
# The spool of this checkout's Guard, so that two checkouts (or a Guard run
# by hand with the default ~/.cache/guard/spool) never share one.
export GUARD_SPOOL_DIR=${GUARD_SPOOL_DIR:-$GUARD_ROOT/tmp/spool}
export GUARD_KEY_SECRET
log "guard serve (config $GUARD_CONFIG; API keys are in it)"
exec go run ./cmd/guard serve --migrate "$@"
