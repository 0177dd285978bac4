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

# The directory holding the server programs `$@` (default: initdb pg_ctl), as
# ensure-postgres.sh looks for them: PATH, else the newest /usr/lib/postgresql/*/bin; as root
# with apt-get, the `postgresql` package is installed when none has them. Prints nothing when
# they cannot be found. Always returns 0.
find_pg_bindir() {
    local progs=("$@") d p ok attempt
    [[ ${#progs[@]} -gt 0 ]] || progs=(initdb pg_ctl)
    for attempt in 1 2; do
        while IFS= read -r d; do
            [[ -n "$d" && -d "$d" ]] || continue
            ok=1
            for p in "${progs[@]}"; do
                [[ -x "$d/$p" ]] || ok=0
            done
            if [[ "$ok" == 1 ]]; then
                echo "$d"
                return 0
            fi
        done < <(
            p="$(command -v pg_ctl 2>/dev/null)" && dirname "$(readlink -f "$p")"
            printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5nr
        )
        [[ "$attempt" == 1 && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 || return 0
        printf '[pg-lib] %s not found; installing PostgreSQL: apt-get install -y postgresql\n' \
            "${progs[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update >&2 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2 || return 0
    done
    return 0
}

# The user a private cluster runs as: empty when not root (ourselves); as root (PostgreSQL
# refuses to run as root) `postgres`, else `subgate-pg`, created as ensure-postgres.sh does.
pg_cluster_user() {
    [[ "$(id -u)" == 0 ]] || return 0
    if id -u postgres >/dev/null 2>&1; then
        echo postgres
        return 0
    fi
    id -u subgate-pg >/dev/null 2>&1 ||
        useradd -r -M -s /usr/sbin/nologin subgate-pg >&2 ||
        die "could not create user 'subgate-pg'"
    echo subgate-pg
}

# Runs a command as the cluster user $PG_RUN_AS (set it from pg_cluster_user; empty: ourselves).
as_pg_user() {
    if [[ -z "${PG_RUN_AS:-}" ]]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$PG_RUN_AS" -- "$@"
    else
        su "$PG_RUN_AS" -s /bin/bash -c "$(printf '%q ' "$@")"
    fi
}

# A TCP port on 127.0.0.1 that nothing listens on now. Always returns 0.
free_tcp_port() {
    local port i
    for i in $(seq 1 100); do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
        : "$i"
    done
    return 0
}
