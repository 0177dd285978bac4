#!/usr/bin/env bash
# run-dev.sh — build subgate and run it locally for development (`make run`).
#
#  1. cargo build --bin subgate (debug).
#  2. scripts/ensure-postgres.sh finds or starts PostgreSQL.
#  3. Unless DATABASE_URL is set, creates database "subgate" on that server and
#     points DATABASE_URL at it.
#  4. Fills in development values that are not set in the environment:
#     JWT_SECRET, ADMIN_PASSWORD, WEBHOOK_SECRET, SWEEP_TOKEN and
#     TELEGRAM_WEBHOOK_SECRET are generated once, ADMIN_EMAIL defaults to
#     admin@example.com, and all are kept in target/dev-secrets.env (KEY=value
#     lines), so restarts reuse them. WAYFORPAY_* default to WayForPay's public
#     test merchant. Anything already set in the environment wins.
#  5. Records this start's DATABASE_URL, BIND_ADDR and WAYFORPAY_* in a block at
#     the end of the same file (rewritten at every start, never read back), so
#     `set -a; . target/dev-secrets.env; set +a` gives a shell everything the
#     docs' examples and the CLI need.
#  6. Starts `subgate serve` (which applies migrations and creates the admin
#     account), waits until it answers, checks that the admin password logs in,
#     and prints the address and the login. Ctrl-C stops the server.
#
# SUBGATE_DEV_SECRETS=<path> uses another file instead of target/dev-secrets.env.
# Never use that file or these defaults in production.
# The generators below are called by name (ensure_value KEY gen_…), which shellcheck cannot follow:
# shellcheck disable=SC2317
set -euo pipefail

log() { printf '[run-dev] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECRETS_FILE="${SUBGATE_DEV_SECRETS:-$ROOT/target/dev-secrets.env}"
RECORDED_BEGIN="# >>> recorded by make run at each start; not read back >>>"
RECORDED_END="# <<< recorded by make run <<<"
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

mkdir -p "$(dirname "$SECRETS_FILE")"
(umask 077 && touch "$SECRETS_FILE")
chmod 600 "$SECRETS_FILE"

# Load saved values for variables the environment does not set. Other
# KEY=value lines added by hand (e.g. LOG_FORMAT=json) are honoured too; the
# recorded block (below) is not read back.
declare -A from_env=()
in_recorded=""
while IFS= read -r line || [[ -n "$line" ]]; do
    case "$line" in
    "$RECORDED_BEGIN") in_recorded=1 ;;
    "$RECORDED_END") in_recorded="" ;;
    esac
    [[ -z "$in_recorded" ]] || continue
    [[ "$line" =~ ^([A-Z_][A-Z0-9_]*)=(.*)$ ]] || continue
    key="${BASH_REMATCH[1]}"
    value="${BASH_REMATCH[2]}"
    if [[ "$value" =~ ^\'(.*)\'$ ]]; then value="${BASH_REMATCH[1]}"; fi
    if [[ -z "${!key:-}" ]]; then
        printf -v "$key" '%s' "$value"
        export "${key?}"
        from_env[$key]="file"
    fi
done <"$SECRETS_FILE"

# Set $1 from the generator command "$2 ..." unless set; save generated values.
ensure_value() {
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
gen_admin_email() { printf 'admin@example.com'; }

ensure_value JWT_SECRET gen_jwt
ensure_value ADMIN_PASSWORD gen_password
ensure_value WEBHOOK_SECRET gen_webhook
ensure_value SWEEP_TOKEN gen_token
ensure_value TELEGRAM_WEBHOOK_SECRET gen_token
ensure_value ADMIN_EMAIL gen_admin_email

# WayForPay's public test merchant (from its documentation); not a real secret.
if [[ -z "${WAYFORPAY_MERCHANT_ACCOUNT:-}" && -z "${WAYFORPAY_SECRET_KEY:-}" ]]; then
    export WAYFORPAY_MERCHANT_ACCOUNT=test_merch_n1
    export WAYFORPAY_SECRET_KEY='flk3409refn54t54t*FNJRET'
fi
export BIND_ADDR="${BIND_ADDR:-127.0.0.1:8080}"
export LOG_FORMAT="${LOG_FORMAT:-pretty}"

# ------------------------------------------------------------------ recorded values
# Rewrite the recorded block at the end of the file: the other lines as they
# are, then this start's values, single-quoted so a shell can source them.
sq() { # $1 → a single-quoted shell word
    local q="'" e="'\\''"
    printf "'%s'" "${1//$q/$e}"
}
{
    in_recorded=""
    while IFS= read -r line || [[ -n "$line" ]]; do
        case "$line" in
        "$RECORDED_BEGIN") in_recorded=1 ;;
        "$RECORDED_END") in_recorded="" ;;
        *) [[ -n "$in_recorded" ]] || printf '%s\n' "$line" ;;
        esac
    done <"$SECRETS_FILE"
    printf '%s\n' "$RECORDED_BEGIN"
    for key in DATABASE_URL BIND_ADDR WAYFORPAY_MERCHANT_ACCOUNT WAYFORPAY_SECRET_KEY; do
        printf '%s=%s\n' "$key" "$(sq "${!key:-}")"
    done
    printf '%s\n' "$RECORDED_END"
} >"$SECRETS_FILE.new"
chmod 600 "$SECRETS_FILE.new"
mv "$SECRETS_FILE.new" "$SECRETS_FILE"

# ------------------------------------------------------------------ serve
# Never echo a database password.
shown_db="$(printf '%s' "${DATABASE_URL%%\?*}" | sed -E 's#^([A-Za-z]+://[^:/@]*):[^@/]*@#\1:***@#')"

# Where a client on this machine reaches BIND_ADDR (0.0.0.0 and [::] listen everywhere).
host="${BIND_ADDR%:*}"
case "$host" in
0.0.0.0) host=127.0.0.1 ;;
"[::]") host="[::1]" ;;
esac
BASE_URL="http://$host:${BIND_ADDR##*:}"

json_string() { # $1 → a JSON string literal
    local s="$1"
    s="${s//\\/\\\\}"
    s="${s//\"/\\\"}"
    printf '"%s"' "$s"
}

# The HTTP status of one login with ADMIN_EMAIL / ADMIN_PASSWORD (000: no answer).
login_status() {
    printf '{"email": %s, "password": %s}' "$(json_string "$ADMIN_EMAIL")" \
        "$(json_string "$ADMIN_PASSWORD")" |
        curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST \
            "$BASE_URL/api/auth/login" -H 'content-type: application/json' --data-binary @- ||
        true
}

print_banner() { # $1 = what to say about the admin password
    cat >&2 <<EOF

================================================================
 subgate (development)
   serving on      $BASE_URL
   console         $BASE_URL/console   (sign in with the owner account below)
   admin email     $ADMIN_EMAIL (role: owner)
   admin password  $1
   dev secrets     $SECRETS_FILE
                   (delete it to regenerate; environment variables win;
                   load it into a shell: set -a; . $SECRETS_FILE; set +a)
   database        $shown_db
================================================================

EOF
}

case "${from_env[ADMIN_PASSWORD]}" in
env) password_shown="(from your ADMIN_PASSWORD environment variable)" ;;
*) password_shown="$ADMIN_PASSWORD" ;;
esac

# The server runs as a child, so the banner can come once it answers; Ctrl-C
# reaches it directly, a TERM sent to this script is passed on.
"$BIN" serve &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' INT TERM

if command -v curl >/dev/null 2>&1; then
    for _ in $(seq 1 600); do # up to 60 s
        kill -0 "$server" 2>/dev/null || break
        if curl -fs -o /dev/null --max-time 2 "$BASE_URL/healthz"; then
            # The server creates the admin account before it listens, so this
            # login tells whether ADMIN_PASSWORD is the account's password.
            case "$(login_status)" in
            200) print_banner "$password_shown" ;;
            401) print_banner "NOT APPLIED: $password_shown
                   The account already existed with another password, which it
                   keeps: ADMIN_PASSWORD only creates the account, it never
                   changes a password. Log in with the old password, or drop
                   the database (or the account) to start afresh." ;;
            *) print_banner "$password_shown (not checked: the login did not answer)" ;;
            esac
            break
        fi
        sleep 0.1
    done
else
    print_banner "$password_shown
                   (applied only if the account did not exist yet; the server logs
                   \"ADMIN_PASSWORD was NOT applied\" when it already existed)"
fi

status=0
wait "$server" || status=$?
while kill -0 "$server" 2>/dev/null; do # woken by a signal: wait for the exit
    status=0
    wait "$server" || status=$?
done
exit "$status"
