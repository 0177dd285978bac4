#!/usr/bin/env bash
# chaos.sh — `make chaos`: payments through a database failover.
#
# Starts, under target/chaos/, a private PostgreSQL primary (wal_level replica,
# synchronous_commit on, synchronous_standby_names naming the standby) and a streaming standby
# made from it with pg_basebackup -R, on free loopback ports; checks the standby streams
# synchronously; then runs tests/chaos (cargo test --test chaos), which starts the real
# `subgate serve` with DATABASE_URL naming both hosts and target_session_attrs=read-write,
# floods door 1 with signed payments, has this script kill the primary (pg_ctl stop -m
# immediate, then fences its data directory) and, after a detection delay, promote the standby
# (pg_ctl promote) mid-flood,
# and checks on the new primary that every acknowledged payment is there exactly once.
# Arguments go to the program (make chaos ARGS='--help' lists them).
#
# Whatever happens, everything started here is stopped and the clusters' files are removed;
# the logs stay in target/chaos/ (primary.log, standby.log, subgate.log).
#
# The server programs (initdb, pg_ctl, pg_basebackup) are found as ensure-postgres.sh finds
# them; as root with apt-get, the postgresql package is installed when they are missing, and
# the clusters run as the postgres user (PostgreSQL refuses root).
#
# Internal: `chaos.sh kill DIR` and `chaos.sh promote DIR` are the failover steps the program
# runs mid-flood.
set -euo pipefail

log() { printf '[chaos] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/pg-lib.sh
. "$ROOT/scripts/pg-lib.sh"

# The standby's name in synchronous_standby_names and its walreceiver's application_name.
STANDBY_NAME=chaos_standby

# The failover steps the program runs mid-flood: `chaos.sh kill DIR`, then `chaos.sh promote DIR`.
if [[ "${1:-}" == kill || "${1:-}" == promote ]]; then
    dir="${2:?usage: chaos.sh kill|promote DIR}"
    BINDIR="$(cat "$dir/bindir")"
    PG_RUN_AS="$(cat "$dir/run_as")"
    if [[ "$1" == kill ]]; then
        # The primary dies as on a crash: no shutdown checkpoint, sessions cut.
        as_pg_user "$BINDIR/pg_ctl" -D "$dir/primary" -m immediate -w stop >&2
        # Fencing: the old primary must never come back as a second primary (a failover manager
        # does this with its leader lock or by shutting the node out); here its data directory
        # goes away.
        mv "$dir/primary" "$dir/primary.fenced"
    else
        as_pg_user "$BINDIR/pg_ctl" -D "$dir/standby" -w -t 60 promote >&2
    fi
    exit 0
fi

BINDIR="$(find_pg_bindir initdb pg_ctl pg_basebackup)"
[[ -n "$BINDIR" ]] ||
    die "initdb, pg_ctl and pg_basebackup not found (PATH, /usr/lib/postgresql/*/bin); install PostgreSQL (the postgresql package)"
PSQL="$(find_psql)"
[[ -n "$PSQL" ]] || PSQL="$BINDIR/psql"
PG_RUN_AS="$(pg_cluster_user)"

DIR="$ROOT/target/chaos"
mkdir -p "$DIR"
if [[ -n "$PG_RUN_AS" ]] && ! as_pg_user test -x "$DIR"; then
    # A checkout under a private home directory: the cluster user cannot reach target/.
    DIR="/tmp/subgate-chaos-$(id -u)"
    log "user '$PG_RUN_AS' cannot enter $ROOT/target (a parent directory is not searchable); the clusters go to $DIR"
    mkdir -p "$DIR"
fi
PIDFILE="$DIR/pids"

# Stops whatever a cluster directory runs, immediately; nothing when it runs nothing.
stop_cluster() {
    [[ -f "$1/postmaster.pid" ]] || return 0
    as_pg_user "$BINDIR/pg_ctl" -D "$1" -m immediate -w stop >/dev/null 2>&1 || true
}

# shellcheck disable=SC2317 # runs as the EXIT trap
cleanup() {
    local status=$? pid d
    set +e
    if [[ -f "$PIDFILE" ]]; then
        while IFS= read -r pid; do
            [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null
        done <"$PIDFILE"
        rm -f "$PIDFILE"
    fi
    for d in primary primary.fenced standby; do
        stop_cluster "$DIR/$d"
        rm -rf "${DIR:?}/$d"
    done
    if [[ "$status" != 0 ]]; then
        for d in primary standby; do
            if [[ -s "$DIR/$d.log" ]]; then
                log "last lines of $DIR/$d.log:"
                tail -n 15 "$DIR/$d.log" >&2
            fi
        done
        log "failed (exit $status); logs in $DIR"
    fi
    exit "$status"
}

# A previous run that was killed outright (no trap) may have left its clusters running.
for d in primary primary.fenced standby; do
    stop_cluster "$DIR/$d"
    rm -rf "${DIR:?}/$d"
done
rm -f "$DIR"/*.log "$PIDFILE"
trap cleanup EXIT
# A closed output (make chaos | head) must not kill the script before its clean-up.
trap '' PIPE
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -n "$PG_RUN_AS" ]]; then
    chown "$PG_RUN_AS" "$DIR"
    as_pg_user test -x "$DIR" || die "user '$PG_RUN_AS' cannot enter $DIR"
fi
echo "$BINDIR" >"$DIR/bindir"
echo "$PG_RUN_AS" >"$DIR/run_as"

P1="$(free_tcp_port)"
P2="$(free_tcp_port)"
while [[ "$P2" == "$P1" ]]; do P2="$(free_tcp_port)"; done
[[ -n "$P1" && -n "$P2" ]] || die "no free port found"
log "PostgreSQL binaries: $BINDIR; primary on 127.0.0.1:$P1, standby on 127.0.0.1:$P2"

as_pg_user "$BINDIR/initdb" -D "$DIR/primary" -U postgres --auth=trust -E UTF8 --no-locale \
    --no-sync >"$DIR/initdb.log" 2>&1 || {
    cat "$DIR/initdb.log" >&2
    die "initdb failed"
}
# The settings of a zero-data-loss primary: a commit is acknowledged once the standby has it
# (synchronous_standby_names, set below once the standby exists: until then every commit would
# wait for it). fsync is off to spare the machine (this is a failover test, not a power-loss test: the killed
# server's writes are in the operating system's cache).
cat >>"$DIR/primary/postgresql.conf" <<EOF

listen_addresses = '127.0.0.1'
port = $P1
unix_socket_directories = '$DIR'
max_connections = 100
wal_level = replica
max_wal_senders = 5
synchronous_commit = on
fsync = off
timezone = 'UTC'
EOF
as_pg_user "$BINDIR/pg_ctl" -D "$DIR/primary" -l "$DIR/primary.log" -w -t 60 start >&2 ||
    die "the primary did not start"
"$PSQL" "postgres://postgres@127.0.0.1:$P1/postgres" -X -q -v ON_ERROR_STOP=1 \
    -c "CREATE DATABASE subgate_chaos" || die "CREATE DATABASE failed"

# The standby: a base backup with -R (standby.signal and primary_conninfo), its own port, and
# the application_name the primary waits for. It does not inherit synchronous_standby_names
# (set on the primary after the backup): once promoted it is alone and must not wait for a
# standby of its own, as a failover manager drops synchronous mode until a new standby attaches.
mkdir -m 700 "$DIR/standby"
[[ -z "$PG_RUN_AS" ]] || chown "$PG_RUN_AS" "$DIR/standby"
as_pg_user "$BINDIR/pg_basebackup" -d "host=127.0.0.1 port=$P1 user=postgres" \
    -D "$DIR/standby" -R -X stream -c fast --no-sync >&2 || die "pg_basebackup failed"
cat >>"$DIR/standby/postgresql.auto.conf" <<EOF
port = $P2
primary_conninfo = 'host=127.0.0.1 port=$P1 user=postgres application_name=$STANDBY_NAME'
EOF
as_pg_user "$BINDIR/pg_ctl" -D "$DIR/standby" -l "$DIR/standby.log" -w -t 60 start >&2 ||
    die "the standby did not start"

"$PSQL" "postgres://postgres@127.0.0.1:$P1/postgres" -X -q -v ON_ERROR_STOP=1 \
    -c "ALTER SYSTEM SET synchronous_standby_names = '$STANDBY_NAME'" \
    -c "SELECT pg_reload_conf()" >/dev/null || die "could not make the standby synchronous"
sync_state=""
for _ in $(seq 1 100); do
    sync_state="$("$PSQL" "postgres://postgres@127.0.0.1:$P1/postgres" -X -qAt -c \
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY_NAME' AND state = 'streaming'")"
    [[ "$sync_state" == sync ]] && break
    sleep 0.1
done
[[ "$sync_state" == sync ]] || die "the standby does not stream synchronously (sync_state '$sync_state')"
log "the standby streams synchronously"

export SUBGATE_CHAOS_DATABASE_URL="postgres://postgres@127.0.0.1:$P1,127.0.0.1:$P2/subgate_chaos?target_session_attrs=read-write&sslmode=disable"
export SUBGATE_CHAOS_PRIMARY_URL="postgres://postgres@127.0.0.1:$P1/subgate_chaos?sslmode=disable"
export SUBGATE_CHAOS_STANDBY_URL="postgres://postgres@127.0.0.1:$P2/subgate_chaos?sslmode=disable"
export SUBGATE_CHAOS_SCRIPT="$ROOT/scripts/chaos.sh"
export SUBGATE_CHAOS_DIR="$DIR"
export SUBGATE_CHAOS_PIDFILE="$PIDFILE"

cd "$ROOT"
log "running: cargo test --test chaos -- $*"
cargo test --test chaos -- "$@"
