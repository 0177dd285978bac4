#!/usr/bin/env bash
# test.sh — run the test suite against a real PostgreSQL (`make test`).
#
# Gets an admin URL from scripts/ensure-postgres.sh (which finds or starts a
# server), exports it as SUBGATE_TEST_DATABASE_URL (the test harness builds a
# migrated template database there and clones it once per test), then runs
# `cargo test --workspace` with any extra arguments given to this script,
# e.g.  scripts/test.sh -- --nocapture   or   make test ARGS='webhook'.
# A SUBGATE_TEST_DATABASE_URL already set in the environment is used as is.
#
# scripts/ensure-browser.sh installs Chromium and chromedriver (Debian packages) when missing,
# for the staff console's browser test.
#
# A full run (no arguments) also records every statement the application sends to PostgreSQL
# (SUBGATE_RECORD_STATEMENTS, tests/api/support/helpers/statements.rs) and, when the suite passed,
# compares them with tests/snapshots/statements.sql (scripts/statements.py): a difference fails
# the run. UPDATE_STATEMENTS=1 (`make statements-update`) writes the snapshot instead. A run
# given arguments (a filter, say) records and compares nothing.
#
# Every per-test database of this run carries the run's tag (SUBGATE_TEST_RUN)
# in its name; when cargo exits (or this script is interrupted) they are all
# dropped, so a run leaves only the reusable template database behind.
# Exits with cargo's exit code.
set -euo pipefail

log() { printf '[test] %s\n' "$*" >&2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/pg-lib.sh
. "$ROOT/scripts/pg-lib.sh"
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

# A tag for this run's databases: lower-case hex, as the harness expects.
SUBGATE_TEST_RUN="r$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
export SUBGATE_TEST_RUN


# shellcheck disable=SC2317 # runs as the EXIT trap
drop_run_databases() {
    # Runs as the EXIT trap: a bare `return` there would return the status cargo left, and
    # `set -e` would end the clean-up at its first failing command.
    set +e
    local psql names name dropped=0
    psql="$(find_psql)"
    if [[ -z "$psql" ]]; then
        log "psql not found: this run's databases (subgate_test_*_${SUBGATE_TEST_RUN}_*) are left" \
            "for a later run to drop"
        return 0
    fi
    names="$("$psql" "$SUBGATE_TEST_DATABASE_URL" -X -qAt -c \
        "SELECT datname FROM pg_database
          WHERE datname LIKE 'subgate\\_test\\_%\\_${SUBGATE_TEST_RUN}\\_%'")" || {
        log "could not list this run's databases; a later run drops them"
        return 0
    }
    while IFS= read -r name; do
        [[ -n "$name" ]] || continue
        "$psql" "$SUBGATE_TEST_DATABASE_URL" -X -q -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" \
            >/dev/null 2>&1 && dropped=$((dropped + 1))
    done <<<"$names"
    log "dropped $dropped database(s) left by this run"
}

trap drop_run_databases EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The console's browser test needs Chromium and chromedriver; without them it fails with a
# clear message (the rest of the suite still runs).
"$ROOT/scripts/ensure-browser.sh" || log "WARNING: no browser: the console's browser test will fail"

record=""
if [[ $# -eq 0 ]]; then
    record="$ROOT/target/statements/$SUBGATE_TEST_RUN"
    export SUBGATE_RECORD_STATEMENTS="$record"
    log "recording the statements sent to PostgreSQL in $record"
else
    unset SUBGATE_RECORD_STATEMENTS
fi

log "running: cargo test --workspace $* (run $SUBGATE_TEST_RUN)"
status=0
cargo test --workspace "$@" || status=$?

if [[ -n "$record" ]]; then
    if [[ "$status" -ne 0 ]]; then
        log "the statement snapshot is not compared: the suite failed"
    elif [[ "${UPDATE_STATEMENTS:-}" == 1 ]]; then
        "$ROOT/scripts/statements.py" update "$record" || status=$?
        rm -rf "$record"
    elif "$ROOT/scripts/statements.py" check "$record"; then
        rm -rf "$record"
    else
        status=1
        log "the statement snapshot differs (the recording is kept in $record)"
    fi
fi
exit "$status"
