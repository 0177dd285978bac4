#!/usr/bin/env bash
# stop-postgres.sh — stop the private PostgreSQL cluster that
# scripts/ensure-postgres.sh starts in target/pgdata, if it runs.
# The data stays; delete target/pgdata to start from scratch next time.
# Messages go to stderr, prefixed "[stop-postgres]".
set -euo pipefail

log() { printf '[stop-postgres] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PGDATA_DIR="$ROOT/target/pgdata"

if [[ ! -f "$PGDATA_DIR/PG_VERSION" ]]; then
    log "no private cluster in $PGDATA_DIR; nothing to stop"
    exit 0
fi

version="$(cat "$PGDATA_DIR/PG_VERSION")"
if [[ -x "/usr/lib/postgresql/$version/bin/pg_ctl" ]]; then
    PG_CTL="/usr/lib/postgresql/$version/bin/pg_ctl"
elif PG_CTL="$(command -v pg_ctl)"; then
    :
else
    die "pg_ctl not found (looked in /usr/lib/postgresql/$version/bin and on PATH)"
fi

# pg_ctl refuses to run as root; run it as the owner of the data directory.
owner="$(stat -c %U "$PGDATA_DIR")"
as_owner() {
    if [[ "$(id -u)" != 0 || "$owner" == root ]]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$owner" -- "$@"
    else
        su "$owner" -s /bin/bash -c "$(printf '%q ' "$@")"
    fi
}

if ! as_owner "$PG_CTL" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
    log "the private cluster in $PGDATA_DIR is not running"
    exit 0
fi

log "stopping the private cluster in $PGDATA_DIR"
as_owner "$PG_CTL" -D "$PGDATA_DIR" -m fast -w stop >&2
log "stopped"
