#!/usr/bin/env bash
# test.sh — run the test suite against a real PostgreSQL (`make test`).
#
# Gets an admin URL from scripts/ensure-postgres.sh (which finds or starts a
# server), exports it as SUBGATE_TEST_DATABASE_URL (the test harness builds a
# migrated template database there and clones it once per test), then runs
# `cargo test --workspace` with any extra arguments given to this script,
# e.g.  scripts/test.sh -- --nocapture   or   make test ARGS='webhook'.
# A SUBGATE_TEST_DATABASE_URL already set in the environment is used as is.
# Exits with cargo's exit code.
set -euo pipefail

log() { printf '[test] %s\n' "$*" >&2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -n "${SUBGATE_TEST_DATABASE_URL:-}" ]]; then
    log "SUBGATE_TEST_DATABASE_URL is set; using it as is"
else
    SUBGATE_TEST_DATABASE_URL="$("$ROOT/scripts/ensure-postgres.sh" | tail -n 1)"
    [[ -n "$SUBGATE_TEST_DATABASE_URL" ]] || {
        log "ERROR: ensure-postgres.sh printed no URL"
        exit 1
    }
fi
export SUBGATE_TEST_DATABASE_URL

log "running: cargo test --workspace $*"
exec cargo test --workspace "$@"
