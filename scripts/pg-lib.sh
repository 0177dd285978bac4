# shellcheck shell=bash
# pg-lib.sh — PostgreSQL helpers sourced by the scripts that need a client or a scratch database
# (test.sh, bench.sh, docs-walkthrough.sh, fuzz-api.sh). Expects the caller's ROOT, log and die.

# The psql client: on PATH, else Debian's versioned directory; prints nothing when absent.
# Always returns 0 (it also runs inside EXIT traps, where a bare `return` would pass on the
# status the interrupted command left).
find_psql() {
    local d
    if command -v psql >/dev/null 2>&1; then
        command -v psql
        return 0
    fi
    for d in /usr/lib/postgresql/*/bin; do
        if [[ -x "$d/psql" ]]; then
            echo "$d/psql"
            return 0
        fi
    done
    return 0
}

# Creates an empty database named PREFIX_<time>_<random> on the admin URL `make test` uses
# (SUBGATE_TEST_DATABASE_URL, else what ensure-postgres.sh finds or starts, ignoring a
# DATABASE_URL of the caller's shell). Sets admin_url, PSQL, db_name and db_url (the admin URL
# with its database replaced, query string kept); the caller drops it.
create_scratch_database() { # $1 = prefix
    local scheme rest query=""
    admin_url="${SUBGATE_TEST_DATABASE_URL:-}"
    if [[ -z "$admin_url" ]]; then
        admin_url="$(env -u DATABASE_URL "$ROOT/scripts/ensure-postgres.sh" | tail -n 1)"
    fi
    [[ -n "$admin_url" ]] || die "ensure-postgres.sh printed no URL"
    PSQL="$(find_psql)"
    [[ -n "$PSQL" ]] || die "psql not found; install the PostgreSQL client (apt-get install postgresql-client)"
    db_name="$1_$(date +%s)_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
    "$PSQL" "$admin_url" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db_name" >&2 ||
        die "could not create database $db_name"
    scheme="${admin_url%%://*}"
    rest="${admin_url#*://}"
    if [[ "$rest" == *\?* ]]; then
        query="?${rest#*\?}"
        rest="${rest%%\?*}"
    fi
    # shellcheck disable=SC2034 # db_url is this function's result, read by its caller
    db_url="$scheme://${rest%%/*}/$db_name$query"
}
