#!/usr/bin/env bash
# Instructions per audit row, per set of indexes (docs/performance.md,
# "Postgres CPU per audit row", the second round): the count that
# scripts/pgrow.sh's CPU time approximates, but exact and the same on a
# busy machine. Starts a private Postgres cluster (PGROW_PORT, default
# 5497) whose processes run under valgrind's cachegrind (no cache
# simulation), then for every variant given runs scripts/pgrow twice, with
# N and 2N rows (PGROW_IR_ROWS, default 20000) on one connection, and
# prints the COPY backend's instructions (Ir) per row: the difference of
# the two runs divided by N, so that creating the schema cancels out. The
# WAL writer, checkpointer and autovacuum are not counted. Example:
# `scripts/pgrow-ir.sh pk schema3 schema4`. Takes about a minute per
# variant and schema; never touches the shared Postgres. Installs
# postgresql and valgrind with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
GUARD_SCRIPT=pgrow-ir
. ./scripts/lib.sh

ensure_go
pgbin=$(private_pg_bin)
command -v valgrind >/dev/null 2>&1 || apt_install valgrind >&2
port=${PGROW_PORT:-5497}
n=${PGROW_IR_ROWS:-20000}
work=$(mktemp -d /tmp/guard-pgrow-ir.XXXXXX)
chmod 755 "$work"
cleanup() {
	private_pg_stop "$pgbin" "$work/pg"
	rm -rf "$work"
}
trap cleanup EXIT

# pg_ctl starts this wrapper as the postmaster; forked backends stay under
# valgrind, each writing its counts to cg.PID when it exits.
mkdir "$work/cg"
chmod 777 "$work/cg"
printf '#!/bin/sh\nexec valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=%s/cg/cg.%%p %s/postgres "$@"\n' \
	"$work" "$pgbin" >"$work/postgres"
chmod 755 "$work/postgres"
mkdir "$work/pg" && chown postgres "$work/pg" 2>/dev/null || true
as_postgres "$pgbin/initdb" -D "$work/pg" -A trust -U postgres >/dev/null
as_postgres "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w -t 300 -p "$work/postgres" \
	-o "-p $port -k $work/pg -c listen_addresses=127.0.0.1" start >/dev/null
psql -w "postgres://postgres@127.0.0.1:$port/postgres" -qAtc "CREATE DATABASE pgrow" >/dev/null
log "private Postgres $("$pgbin/postgres" --version | awk '{print $3}') under cachegrind on 127.0.0.1:$port; rows $n and $((2 * n))"
go build -o "$work/pgrow" ./scripts/pgrow

# ir VARIANT ROWS prints the instructions of the COPY backend of one run.
ir() {
	local pid f
	pid=$("$work/pgrow" -db "postgres://postgres@127.0.0.1:$port/pgrow?sslmode=disable" \
		-pidfile "$work/pg/postmaster.pid" -v "$1" -rows "$2" -reps 1 -pids 2>&1 >/dev/null |
		awk '/backend pids/ {print $3}')
	f="$work/cg/cg.$pid"
	for _ in $(seq 120); do
		if [ -s "$f" ] && grep -q '^summary:' "$f"; then
			break
		fi
		sleep 1
	done
	awk '/^summary:/ {print $2}' "$f"
	rm -f "$work"/cg/cg.*
}

printf '%-16s %14s %14s %10s\n' variant "Ir ($n)" "Ir ($((2 * n)))" Ir/row
for v in "$@"; do
	a=$(ir "$v" "$n")
	b=$(ir "$v" $((2 * n)))
	printf '%-16s %14s %14s %10d\n' "$v" "$a" "$b" $(((b - a) / n))
done
