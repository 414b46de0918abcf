#!/usr/bin/env bash
# Postgres CPU per audit row, per set of indexes (docs/performance.md,
# "Postgres CPU per audit row"): starts a private Postgres cluster
# (PGROW_PORT, default 5498) in a temporary directory, runs scripts/pgrow
# against it with the arguments given (for example
# `-v pk,schema2,schema3 -rows 200000 -reps 3`, or `-preload 1000000`), and
# removes the cluster. Never touches the shared Postgres. Installs
# postgresql with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
GUARD_SCRIPT=pgrow
. ./scripts/lib.sh

ensure_go
pgbin=$(private_pg_bin)
port=${PGROW_PORT:-5498}
work=$(mktemp -d /tmp/guard-pgrow.XXXXXX)
chmod 755 "$work"
cleanup() {
	private_pg_stop "$pgbin" "$work/pg"
	rm -rf "$work"
}
trap cleanup EXIT

private_pg_start "$pgbin" "$work/pg" "$port"
psql -w "postgres://postgres@127.0.0.1:$port/postgres" -qAtc "CREATE DATABASE pgrow" >/dev/null
log "private Postgres $("$pgbin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$work/pgrow" ./scripts/pgrow
"$work/pgrow" -db "postgres://postgres@127.0.0.1:$port/pgrow?sslmode=disable" \
	-pidfile "$work/pg/postmaster.pid" "$@"
