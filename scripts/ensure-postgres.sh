#!/usr/bin/env bash
# Make sure PostgreSQL's server binaries (initdb, pg_ctl) exist, so `make test` can run the ledger's
# tests against a real PostgreSQL (tests/conftest.py starts a private server on 127.0.0.1).
# Installs Debian's `postgresql` package when they are missing and we are root (a fresh CI clone).
set -euo pipefail

found() {
    command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1 && return 0
    compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

if found; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-postgres: PostgreSQL server binaries (initdb, pg_ctl) not found." >&2
    echo "To fix: install PostgreSQL (Debian/Ubuntu: sudo apt-get install -y postgresql; macOS: brew install postgresql)," >&2
    echo "        or run the tests without COMPUTEWISE_REQUIRE_POSTGRES=1 to skip the PostgreSQL cases." >&2
    exit 1
fi
echo "ensure-postgres: installing PostgreSQL with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
found || { echo "ensure-postgres: postgresql installed, but initdb/pg_ctl are still missing" >&2; exit 1; }
