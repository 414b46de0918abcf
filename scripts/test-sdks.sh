#!/usr/bin/env bash
# Runs the test suites that `go test ./...` from the root does not reach:
#
#   sdk/            the Go SDK, its own module (standard library only)
#   sdk/guardgin/   the gin middleware, its own module
#   sdks/typescript the TypeScript SDK (node:test), when node and npm are here
#   sdks/python     the Python SDK (unittest), when python3 is here
#
# Every suite drives a real Guard: this script builds cmd/guard once and
# hands it over as GUARD_BIN; each test starts its own `guard serve` on a
# free loopback port with the in-memory stores. Missing node or python3 is
# a skip, said out loud; with CI set it is a failure.
#
# The proxy tests (cmd/guard/proxies_test.go, part of the root suite) run
# nginx and Caddy when installed and skip otherwise. With
# GUARD_INSTALL_PROXIES=1 (or CI set) this script installs them (apt-get,
# nginx-light and caddy) when missing and runs those tests again.
#
#   ./scripts/test-sdks.sh               # everything
#   ./scripts/test-sdks.sh -run TestX    # extra arguments go to the Go SDK
#                                        # modules' go test; the TypeScript
#                                        # and Python suites are then skipped
set -euo pipefail

cd "$(dirname "$0")/.."
GUARD_SCRIPT=test-sdks.sh
# shellcheck source=scripts/lib.sh
. ./scripts/lib.sh

status=0
fail() {
	log "FAILED: $*"
	status=1
}
skip() {
	if [ -n "${CI:-}" ]; then
		fail "$* (CI is set: nothing may be skipped)"
	else
		log "SKIPPED: $*"
	fi
}

bin_dir=$(mktemp -d)
trap 'rm -rf "$bin_dir"' EXIT
log "go build ./cmd/guard (the Guard every SDK suite runs against)"
go build -o "$bin_dir/guard" ./cmd/guard
export GUARD_BIN="$bin_dir/guard"

for mod in sdk sdk/guardgin; do
	log "($mod) go test -race -count=1 ./... $*"
	(cd "$mod" && go test -race -count=1 ./... "$@") || fail "go tests of $mod"
done

if [ $# -gt 0 ]; then
	log "extra arguments given: the TypeScript and Python suites are not run"
	exit "$status"
fi

if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
	if node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=3)?0:1)'; then
		log "(sdks/typescript) npm ci && npm test, node $(node --version)"
		(
			cd sdks/typescript
			if [ ! -d node_modules ]; then npm ci --no-audit --no-fund --loglevel=error; fi
			npm test --silent
		) || fail "TypeScript SDK tests"
	else
		skip "TypeScript SDK tests: node $(node --version) is older than 20.3"
	fi
else
	skip "TypeScript SDK tests: node and npm are not installed"
fi

if command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
	log "(sdks/python) python3 -m unittest, $(python3 --version)"
	(cd sdks/python && python3 -m unittest discover -s tests -t .) || fail "Python SDK tests"
else
	skip "Python SDK tests: python3 (3.9 or newer) is not installed"
fi

missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v caddy >/dev/null 2>&1 || missing+=(caddy)
if [ ${#missing[@]} -gt 0 ]; then
	if [ -n "${GUARD_INSTALL_PROXIES:-}${CI:-}" ]; then
		if apt_install "${missing[@]}"; then
			log "go test -run '^TestProxy' ./cmd/guard (now with ${missing[*]})"
			go test -count=1 -run '^TestProxy' ./cmd/guard || fail "proxy tests"
		else
			fail "could not install ${missing[*]} for the proxy tests"
		fi
	else
		log "the proxy tests skipped ${missing[*]}; GUARD_INSTALL_PROXIES=1 installs them"
	fi
fi

exit "$status"
