#!/usr/bin/env bash
# Runs Guard's whole test suite against a real Redis and Postgres.
#
#   ./scripts/test.sh                 # go test -race -count=1 ./..., then
#                                     # scripts/test-sdks.sh (the SDK modules,
#                                     # TypeScript, Python)
#   ./scripts/test.sh -run TestServe  # extra arguments go to go test
#
# Redis (127.0.0.1:6379) and Postgres (127.0.0.1:5432) are reused when they
# answer. Otherwise they are installed with apt-get when missing (Debian or
# Ubuntu) and started locally: Redis without persistence, Postgres through
# pg_ctlcluster. That needs root; as another user the script runs those
# steps through sudo. It never stops, restarts or flushes a server that was
# already running. The race detector needs cgo and so a C compiler: when
# none is installed, the script installs gcc (apt-get) and says so, and
# likewise chromium for the review pages' browser tests. When
# Postgres refuses passwordless TCP logins, the script creates a guard_test
# role with a password (GUARD_TEST_PG_PASSWORD, default guard-test) and
# leaves it in place. A Redis it starts keeps its pid file and log in tmp/.
#
# The tests read GUARD_TEST_REDIS_URL and GUARD_TEST_DATABASE_URL (defaults:
# redis://127.0.0.1:6379/0 and postgres://postgres@127.0.0.1:5432/postgres);
# set them to use other servers. With CI set, integration tests fail instead
# of skipping when a server is missing.
set -euo pipefail

cd "$(dirname "$0")/.."
GUARD_SCRIPT=test.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh

ensure_go
ensure_cgo
ensure_redis
ensure_postgres
ensure_chromium

log "go test -race -count=1 ./... $*"
status=0
go test -race -count=1 ./... "$@" || status=$?
./scripts/test-sdks.sh "$@" || status=$((status == 0 ? $? : status))
exit "$status"
