#!/usr/bin/env bash
# run-dev.sh — build subgate and run it locally for development (`make run`).
#
#  1. cargo build --bin subgate (debug).
#  2. scripts/ensure-postgres.sh finds or starts PostgreSQL.
#  3. Unless DATABASE_URL is set, creates database "subgate" on that server and
#     points DATABASE_URL at it.
#  4. Fills in development secrets that are not set in the environment:
#     JWT_SECRET, ADMIN_PASSWORD, WEBHOOK_SECRET, SWEEP_TOKEN and
#     TELEGRAM_WEBHOOK_SECRET are generated once and kept in
#     target/dev-secrets.env (KEY=value lines), so restarts reuse them;
#     ADMIN_EMAIL defaults to admin@example.com and WAYFORPAY_* to WayForPay's
#     public test merchant. Anything already set in the environment wins.
#  5. Prints the admin login and address, then execs `subgate serve` (which
#     applies migrations and creates the admin account on start).
#
# Never use target/dev-secrets.env or these defaults in production.
set -euo pipefail

log() { printf '[run-dev] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECRETS_FILE="$ROOT/target/dev-secrets.env"
DB_NAME=subgate

# ------------------------------------------------------------------ build
log "building: cargo build --bin subgate"
cargo build --bin subgate
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/subgate"
[[ -x "$BIN" ]] || die "built binary not found at $BIN"

# ------------------------------------------------------------------ database
if [[ -n "${DATABASE_URL:-}" ]]; then
    log "DATABASE_URL is set; using it as is"
    "$ROOT/scripts/ensure-postgres.sh" >/dev/null
else
    admin_url="$("$ROOT/scripts/ensure-postgres.sh" | tail -n 1)"
    [[ -n "$admin_url" ]] || die "ensure-postgres.sh printed no URL"

    PSQL="$(command -v psql || true)"
    if [[ -z "$PSQL" ]]; then
        for d in /usr/lib/postgresql/*/bin; do
            if [[ -x "$d/psql" ]]; then PSQL="$d/psql"; fi
        done
    fi
    [[ -n "$PSQL" ]] || die "psql not found; install the PostgreSQL client (apt-get install postgresql-client) or set DATABASE_URL"

    exists="$("$PSQL" "$admin_url" -X -qAt -v ON_ERROR_STOP=1 \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" ||
        die "could not query the server at $admin_url"
    if [[ "$exists" != 1 ]]; then
        log "creating database $DB_NAME"
        # A concurrent creator may win the race; that is fine if it now exists.
        "$PSQL" "$admin_url" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $DB_NAME" >&2 ||
            [[ "$("$PSQL" "$admin_url" -X -qAt -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" == 1 ]] ||
            die "could not create database $DB_NAME"
    else
        log "database $DB_NAME exists"
    fi

    # Same URL with the database path replaced (query string kept).
    scheme="${admin_url%%://*}"
    rest="${admin_url#*://}"
    query=""
    if [[ "$rest" == *\?* ]]; then
        query="?${rest#*\?}"
        rest="${rest%%\?*}"
    fi
    DATABASE_URL="$scheme://${rest%%/*}/$DB_NAME$query"
    export DATABASE_URL
fi

# ------------------------------------------------------------------ secrets
rand_base64() { # $1 = number of random bytes
    if command -v openssl >/dev/null 2>&1; then
        openssl rand -base64 "$1" | tr -d '\n'
    else
        head -c "$1" /dev/urandom | base64 | tr -d '\n'
    fi
}
rand_hex() { # $1 = number of random bytes; output is [0-9a-f]
    if command -v openssl >/dev/null 2>&1; then
        openssl rand -hex "$1" | tr -d '\n'
    else
        head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n'
    fi
}

mkdir -p "$ROOT/target"
(umask 077 && touch "$SECRETS_FILE")
chmod 600 "$SECRETS_FILE"

# Load saved values for variables the environment does not set. Other
# KEY=value lines added by hand (e.g. LOG_FORMAT=json) are honoured too.
declare -A from_env=()
while IFS= read -r line || [[ -n "$line" ]]; do
    [[ "$line" =~ ^([A-Z_][A-Z0-9_]*)=(.*)$ ]] || continue
    key="${BASH_REMATCH[1]}"
    if [[ -z "${!key:-}" ]]; then
        printf -v "$key" '%s' "${BASH_REMATCH[2]}"
        export "${key?}"
        from_env[$key]="file"
    fi
done <"$SECRETS_FILE"

# Set $1 from the generator command "$2 ..." unless set; save generated values.
ensure_secret() {
    local key="$1" value
    shift
    if [[ -n "${!key:-}" ]]; then
        [[ -n "${from_env[$key]:-}" ]] || from_env[$key]="env"
        return
    fi
    value="$("$@")"
    printf -v "$key" '%s' "$value"
    export "${key?}"
    printf '%s=%s\n' "$key" "$value" >>"$SECRETS_FILE"
    from_env[$key]="generated"
    log "generated $key (saved in $SECRETS_FILE)"
}

gen_jwt() { rand_base64 48; }
gen_password() { rand_base64 18 | tr '+/' '-_'; }
gen_webhook() { printf 'whsec_%s' "$(rand_base64 24)"; }
gen_token() { rand_hex 32; }

ensure_secret JWT_SECRET gen_jwt
ensure_secret ADMIN_PASSWORD gen_password
ensure_secret WEBHOOK_SECRET gen_webhook
ensure_secret SWEEP_TOKEN gen_token
ensure_secret TELEGRAM_WEBHOOK_SECRET gen_token

export ADMIN_EMAIL="${ADMIN_EMAIL:-admin@example.com}"
# WayForPay's public test merchant (from its documentation); not a real secret.
if [[ -z "${WAYFORPAY_MERCHANT_ACCOUNT:-}" && -z "${WAYFORPAY_SECRET_KEY:-}" ]]; then
    export WAYFORPAY_MERCHANT_ACCOUNT=test_merch_n1
    export WAYFORPAY_SECRET_KEY='flk3409refn54t54t*FNJRET'
fi
export BIND_ADDR="${BIND_ADDR:-127.0.0.1:8080}"
export LOG_FORMAT="${LOG_FORMAT:-pretty}"

case "${from_env[ADMIN_PASSWORD]}" in
env) shown_password="(from your ADMIN_PASSWORD environment variable)" ;;
*) shown_password="$ADMIN_PASSWORD" ;;
esac

# Never echo a database password.
shown_db="$(printf '%s' "${DATABASE_URL%%\?*}" | sed -E 's#^([A-Za-z]+://[^:/@]*):[^@/]*@#\1:***@#')"

cat >&2 <<EOF

================================================================
 subgate (development)
   serving on      http://$BIND_ADDR
   admin email     $ADMIN_EMAIL
   admin password  $shown_password
   dev secrets     $SECRETS_FILE
                   (delete it to regenerate; environment variables win)
   database        $shown_db
================================================================

EOF

exec "$BIN" serve
