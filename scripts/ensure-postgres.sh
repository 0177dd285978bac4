#!/usr/bin/env bash
# ensure-postgres.sh — make sure a PostgreSQL server is reachable and print an
# admin connection URL on the LAST line of stdout, e.g.
#     postgres://postgres@127.0.0.1:5432/postgres
# Progress messages go to stderr, prefixed "[ensure-postgres]".
#
# Usage:  url="$(scripts/ensure-postgres.sh)"
#
# What it does, in order:
#   a. DATABASE_URL set and non-empty: check that it answers and print it.
#   b. Else, a server answers on 127.0.0.1:5432 and lets us log in: print
#      postgres://postgres@127.0.0.1:5432/postgres (PGUSER / PGPASSWORD, if
#      set, replace the user name and add a password).
#   c. Else start (initdb first if needed) a private cluster owned by this
#      checkout: data in target/pgdata, socket in target/pgsock, log in
#      target/pgdata.log, trust auth, listening on 127.0.0.1 only.
#      If initdb/pg_ctl are missing and we are root with apt-get, it installs
#      the "postgresql" package. As root it runs the server as the "postgres"
#      system user (or creates "subgate-pg"), since PostgreSQL refuses root.
#      Stop it with scripts/stop-postgres.sh (make clean-db).
#
# Environment:
#   DATABASE_URL              use this server (branch a); nothing is started.
#   PGUSER, PGPASSWORD        credentials for the server on 127.0.0.1:5432.
#   SUBGATE_PG_PORT           port of the private cluster (default 55432).
#   SUBGATE_PG_FORCE_PRIVATE  1: skip branch b and always use the private
#                             cluster, even when 5432 answers.
set -euo pipefail

log() { printf '[ensure-postgres] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="$ROOT/target"
PGDATA_DIR="$TARGET/pgdata"
PGSOCK_DIR="$TARGET/pgsock"
PGLOG="$TARGET/pgdata.log"
PORT="${SUBGATE_PG_PORT:-55432}"

case "$PORT" in
'' | *[!0-9]*) die "SUBGATE_PG_PORT must be a port number, got '$PORT'" ;;
esac

# Percent-encode a string for use in the user-info part of a URL.
urlencode() {
    local s="$1" out="" c i
    local LC_ALL=C
    for ((i = 0; i < ${#s}; i++)); do
        c="${s:i:1}"
        case "$c" in
        [A-Za-z0-9._~-]) out+="$c" ;;
        *) out+="$(printf '%%%02X' "'$c")" ;;
        esac
    done
    printf '%s' "$out"
}

# Is a TCP port open on 127.0.0.1? (fallback when pg_isready is missing)
tcp_open() {
    local port="$1"
    if command -v timeout >/dev/null 2>&1; then
        timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null
    else
        bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null
    fi
}

# Does a server answer on 127.0.0.1:$1?
server_answers() {
    local port="$1"
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h 127.0.0.1 -p "$port" -t 3
    else
        tcp_open "$port"
    fi
}

# Can we log in with this URL? Returns 0 when psql is missing (cannot tell).
can_login() {
    local url="$1" out
    command -v psql >/dev/null 2>&1 || return 0
    if out="$(PGCONNECT_TIMEOUT=5 psql "$url" -X -qAt -c 'SELECT 1' 2>&1)"; then
        return 0
    fi
    log "psql says: ${out//$'\n'/ }"
    return 1
}

# ---------------------------------------------------------------- branch a
if [[ -n "${DATABASE_URL:-}" ]]; then
    log "DATABASE_URL is set; checking that its server answers"
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -d "$DATABASE_URL" -t 5 ||
            die "the server in DATABASE_URL does not answer (pg_isready failed); start it or unset DATABASE_URL"
    elif command -v psql >/dev/null 2>&1; then
        PGCONNECT_TIMEOUT=5 psql "$DATABASE_URL" -X -qAt -c 'SELECT 1' >/dev/null ||
            die "cannot connect with DATABASE_URL (psql failed); start the server or unset DATABASE_URL"
    else
        log "neither pg_isready nor psql is installed; using DATABASE_URL unchecked"
    fi
    log "using DATABASE_URL"
    printf '%s\n' "$DATABASE_URL"
    exit 0
fi

# ---------------------------------------------------------------- branch b
if [[ "${SUBGATE_PG_FORCE_PRIVATE:-0}" == 1 ]]; then
    log "SUBGATE_PG_FORCE_PRIVATE=1: not looking at 127.0.0.1:5432"
elif server_answers 5432; then
    user="${PGUSER:-postgres}"
    userinfo="$(urlencode "$user")"
    if [[ -n "${PGPASSWORD:-}" ]]; then
        userinfo+=":$(urlencode "$PGPASSWORD")"
    fi
    url="postgres://$userinfo@127.0.0.1:5432/postgres"
    if can_login "$url"; then
        log "a PostgreSQL server answers on 127.0.0.1:5432; using it as user '$user'"
        printf '%s\n' "$url"
        exit 0
    fi
    log "a server answers on 127.0.0.1:5432 but refuses user '$user'; falling back to a private cluster"
    log "(set DATABASE_URL, or PGUSER/PGPASSWORD, to use that server instead)"
else
    log "no PostgreSQL server answers on 127.0.0.1:5432"
fi

# ---------------------------------------------------------------- branch c
log "using a private cluster in $PGDATA_DIR on port $PORT"

# Prints the directory holding initdb and pg_ctl, or nothing.
find_bindir() {
    local want="" d initdb_path pgctl_path
    # An existing cluster must be run by its own major version.
    if [[ -f "$PGDATA_DIR/PG_VERSION" ]]; then
        want="$(cat "$PGDATA_DIR/PG_VERSION")"
        if [[ -x "/usr/lib/postgresql/$want/bin/pg_ctl" && -x "/usr/lib/postgresql/$want/bin/initdb" ]]; then
            echo "/usr/lib/postgresql/$want/bin"
            return
        fi
    fi
    if initdb_path="$(command -v initdb)" && pgctl_path="$(command -v pg_ctl)"; then
        initdb_path="$(readlink -f "$initdb_path")"
        pgctl_path="$(readlink -f "$pgctl_path")"
        if [[ "$(dirname "$initdb_path")" == "$(dirname "$pgctl_path")" ]]; then
            dirname "$pgctl_path"
            return
        fi
    fi
    # Highest installed version.
    while IFS= read -r d; do
        if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
            echo "$d"
            return
        fi
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5nr)
}

BINDIR="$(find_bindir)"
if [[ -z "$BINDIR" ]]; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "initdb/pg_ctl not found; installing PostgreSQL: apt-get update && apt-get install -y postgresql"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update >&2
        apt-get install -y postgresql >&2
        BINDIR="$(find_bindir)"
    fi
fi
[[ -n "$BINDIR" ]] ||
    die "initdb/pg_ctl not found (looked on PATH and in /usr/lib/postgresql/*/bin); install PostgreSQL or set DATABASE_URL"
log "PostgreSQL binaries: $BINDIR ($("$BINDIR/pg_ctl" --version))"

if [[ -f "$PGDATA_DIR/PG_VERSION" ]]; then
    have="$(cat "$PGDATA_DIR/PG_VERSION")"
    bin_major="$("$BINDIR/pg_ctl" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/')"
    [[ "$have" == "$bin_major" ]] ||
        die "$PGDATA_DIR was created by PostgreSQL $have but only $bin_major is available; run scripts/stop-postgres.sh and delete $PGDATA_DIR"
fi

# PostgreSQL refuses to run as root: pick an unprivileged user to run it.
RUN_AS=""
if [[ "$(id -u)" == 0 ]]; then
    if id -u postgres >/dev/null 2>&1; then
        RUN_AS=postgres
    else
        if ! id -u subgate-pg >/dev/null 2>&1; then
            log "running as root; creating system user 'subgate-pg' to own the cluster"
            useradd -r -M -d "$PGDATA_DIR" -s /usr/sbin/nologin subgate-pg >&2 ||
                die "could not create user 'subgate-pg'"
        fi
        RUN_AS=subgate-pg
    fi
    log "running as root; the cluster runs as user '$RUN_AS'"
fi

# Run a command as $RUN_AS (or as ourselves when not root).
as_pg() {
    if [[ -z "$RUN_AS" ]]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$RUN_AS" -- "$@"
    else
        local cmd
        cmd="$(printf '%q ' "$@")"
        su "$RUN_AS" -s /bin/bash -c "$cmd"
    fi
}

mkdir -p "$TARGET"

# Serialise concurrent callers (two `make test` at once) around initdb/start.
# The lock fd is closed for pg_ctl so the server does not inherit it.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$TARGET/pgdata.lock"
    flock -w 120 9 || die "timed out waiting for $TARGET/pgdata.lock"
fi

mkdir -p "$PGSOCK_DIR"
touch "$PGLOG"
if [[ -n "$RUN_AS" ]]; then
    chown "$RUN_AS" "$PGSOCK_DIR" "$PGLOG"
    as_pg test -x "$TARGET" ||
        die "user '$RUN_AS' cannot enter $TARGET (a parent directory is not world-searchable); set DATABASE_URL instead"
fi

if [[ ! -f "$PGDATA_DIR/PG_VERSION" ]]; then
    if [[ -d "$PGDATA_DIR" ]] && [[ -n "$(ls -A "$PGDATA_DIR")" ]]; then
        die "$PGDATA_DIR exists but holds no cluster; delete it and try again"
    fi
    log "initialising a new cluster in $PGDATA_DIR (initdb -U postgres --auth=trust)"
    mkdir -p "$PGDATA_DIR"
    chmod 700 "$PGDATA_DIR"
    [[ -z "$RUN_AS" ]] || chown "$RUN_AS" "$PGDATA_DIR"
    as_pg "$BINDIR/initdb" -D "$PGDATA_DIR" -U postgres --auth=trust -E UTF8 --no-locale >&2 9>&- ||
        die "initdb failed"
elif [[ -n "$RUN_AS" && "$(stat -c %U "$PGDATA_DIR")" != "$RUN_AS" ]]; then
    # A cluster left by an earlier run as another user: make it ours.
    log "handing $PGDATA_DIR over to user '$RUN_AS'"
    chown -R "$RUN_AS" "$PGDATA_DIR"
fi

status=0
as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1 9>&- || status=$?
if [[ "$status" == 0 ]]; then
    # Already running: trust the port it actually listens on (postmaster.pid line 4).
    running_port="$(sed -n 4p "$PGDATA_DIR/postmaster.pid" 2>/dev/null || true)"
    if [[ -n "$running_port" && "$running_port" != "$PORT" ]]; then
        log "the private cluster already runs on port $running_port (not $PORT); using $running_port"
        PORT="$running_port"
    else
        log "the private cluster is already running on port $PORT"
    fi
else
    log "starting the private cluster on 127.0.0.1:$PORT (log: $PGLOG)"
    if ! as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$PGLOG" -w -t 60 \
        -o "-p $PORT -k '$PGSOCK_DIR' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
        start >&2 9>&-; then
        log "pg_ctl start failed; last lines of $PGLOG:"
        tail -n 20 "$PGLOG" >&2 || true
        die "could not start the private cluster (is port $PORT taken? set SUBGATE_PG_PORT)"
    fi
fi

url="postgres://postgres@127.0.0.1:$PORT/postgres"
if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h 127.0.0.1 -p "$PORT" -t 10 ||
        die "the private cluster does not answer on 127.0.0.1:$PORT; see $PGLOG"
fi
can_login "$url" || die "cannot log in to the private cluster as postgres; see $PGLOG"
log "private cluster ready: $url"
printf '%s\n' "$url"
