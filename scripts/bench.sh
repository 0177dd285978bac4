#!/usr/bin/env bash
# bench.sh — run the benchmarks against a real PostgreSQL (`make bench`).
#
# Like scripts/test.sh: exports SUBGATE_TEST_DATABASE_URL (from the
# environment, else from scripts/ensure-postgres.sh) and runs `cargo bench`
# with any extra arguments given to this script. Exits with cargo's exit code.
set -euo pipefail

log() { printf '[bench] %s\n' "$*" >&2; }

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

log "running: cargo bench $*"
exec cargo bench "$@"
