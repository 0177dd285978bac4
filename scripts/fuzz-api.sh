#!/usr/bin/env bash
# fuzz-api.sh — test the live server against its own OpenAPI document (`make fuzz`; CI runs it
# after `make docs-test`).
#
# schemathesis generates requests for every operation of /api/openapi.json — valid ones and
# deliberately invalid ones — and checks every answer: no 5xx, and status code, content type,
# headers and body as the document describes them (plus its checks that unauthenticated
# requests are refused, that unsupported methods get 405 with Allow, and that invalid data is
# refused). Any failure fails the run, with a reproducing curl command in the output.
#
# What it does:
#  1. installs the fuzzer (scripts/fuzz/requirements.txt, pinned) with pip into a virtual
#     environment in target/fuzz/venv, once (again when the requirements change);
#  2. creates a fresh database subgate_fuzz_<time>_<random> (dropped at the end) on the
#     PostgreSQL of `make test` (SUBGATE_TEST_DATABASE_URL, else scripts/ensure-postgres.sh);
#  3. makes a P-256 key pair for door 5 (openssl), starts a stand-in Telegram Bot API that also
#     serves that public key as Monobank's (scripts/fuzz/fake_bot.py) and the server
#     (scripts/run-dev.sh, secrets in target/fuzz/dev-secrets.env, every payment door open:
#     Stripe, Monobank and Crypto Pay with stand-in credentials) on free loopback ports, with
#     bcrypt cost 4 and a login throttle of 1000 failures, so that fuzzed logins stay cheap and
#     reach the login's logic, and none of the service's variables inherited from your shell;
#  4. validates the document with openapi-spec-validator (OpenAPI 3.1);
#  5. seeds a few records of each kind, so generated ids sometimes name real ones;
#  6. runs schemathesis with a staff token and the hooks of scripts/fuzz/hooks.py, which put
#     valid credentials on the payment doors' requests (see there);
#  7. stops everything. Reports (JUnit, and the server's log) are in target/fuzz/.
#
# Bounds: FUZZ_MAX_EXAMPLES generated cases per operation and phase (default 50) and
# FUZZ_MAX_TIME seconds in all (default 300: the fuzzing and stateful phases repeat until it is
# spent); FUZZ_SEED makes a run reproducible.
#
# What is not checked, and why (scripts/fuzz/schemathesis.toml has the configuration):
#  - positive_data_acceptance (valid requests must succeed) is off: a request valid by the
#    document can still name a record that does not exist or be refused by the current state
#    (a subscriber or channel id → 422, a taken telegram_user_id → 409), as documented;
#  - on POST /api/webhook/payment, negative_data_rejection is off: an event whose type is not
#    `payment.succeeded` is acknowledged whatever its other fields (the contract), so a body that
#    breaks the rules of the payment fields is rightly accepted when its type is another;
#  - "invalid data accepted" for a body of only whitespace is set aside (hooks.py): such a body
#    is read as none (`{}`), a documented leniency, so an optional body's is rightly accepted;
#  - a valid Idempotency-Key the fuzzer generated gets a unique suffix (hooks.py): generated
#    keys repeat across unrelated requests, and a repeat is replayed by design, even the 201 of
#    a record deleted since, which the stateful checks would read as a lost resource;
#  - POST /api/auth/login is fuzzed like the rest; the admin's token is taken before the run,
#    and the throttle's 429 is a documented answer.
#  - PATCH and DELETE /api/staff/{id} of the admin account (whose token the run uses) go to an
#    account that does not exist instead (hooks.py): disabling it or changing its role, which the
#    contract allows once another owner exists, would end the token and the run's coverage.
set -euo pipefail

log() { printf '[fuzz] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/pg-lib.sh
. "$ROOT/scripts/pg-lib.sh"
cd "$ROOT"
WORK="$ROOT/target/fuzz"
VENV="$WORK/venv"
REQUIREMENTS="$ROOT/scripts/fuzz/requirements.txt"
mkdir -p "$WORK"

# ------------------------------------------------------------------ tools
for tool in curl jq python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is needed (apt-get install $tool)"
done
stamp="$VENV/.requirements.sha256"
want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/schemathesis" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    log "installing the fuzzer into $VENV (pip install -r scripts/fuzz/requirements.txt)"
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS" >&2
    echo "$want" >"$stamp"
fi

# ------------------------------------------------------------------ database
create_scratch_database subgate_fuzz

server=""
bot=""
# shellcheck disable=SC2317 # called by cleanup, the EXIT trap
stop() { # $1 = pid
    if [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}
# shellcheck disable=SC2317 # runs as the EXIT trap
cleanup() {
    stop "$server"
    stop "$bot"
    "$PSQL" "$admin_url" -X -q -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 ||
        log "could not drop database $db_name"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ ports
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p=$((19000 + RANDOM % 900))
    while ! port_free "$p"; do p=$((p + 1)); done
    echo "$p"
}
# Door 5's key pair: the stand-in serves its public key as Monobank's, hooks.py signs with it.
command -v openssl >/dev/null 2>&1 || die "openssl is needed (apt-get install openssl)"
MONOBANK_PRIVATE_KEY="$WORK/monobank-key.pem"
openssl ecparam -name prime256v1 -genkey -noout -out "$MONOBANK_PRIVATE_KEY" 2>/dev/null
openssl ec -in "$MONOBANK_PRIVATE_KEY" -pubout -out "$WORK/monobank-pub.pem" 2>/dev/null
export MONOBANK_PRIVATE_KEY
bot_port="$(free_port)"
"$VENV/bin/python" "$ROOT/scripts/fuzz/fake_bot.py" "$bot_port" "$WORK/monobank-pub.pem" &
bot=$!
port="$(free_port)"
while [[ "$port" == "$bot_port" ]] || ! port_free "$port"; do port=$((port + 1)); done

# ------------------------------------------------------------------ server
# None of the service's variables (the table in src/config/mod.rs) leak in from the caller's shell.
config_vars=()
# shellcheck disable=SC2016 # the backticks are the table's, matched literally
while IFS= read -r name; do config_vars+=("$name"); done < <(
    sed -n 's/^\/\/! | `\([A-Z_]*\)`\( \/ `\([A-Z_]*\)`\)\{0,1\} |.*/\1 \3/p' src/config/mod.rs | tr ' ' '\n' | sed '/^$/d'
)
((${#config_vars[@]} > 10)) || die "could not read the variable table of src/config/mod.rs"
for name in "${config_vars[@]}"; do unset "$name"; done

secrets="$WORK/dev-secrets.env"
rm -f "$secrets"
# Door 4's signing secret, for the server and for hooks.py (the API key is never used: the fuzz
# makes no bot orders).
STRIPE_WEBHOOK_SECRET="whsec_fuzz_$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export STRIPE_WEBHOOK_SECRET
# Door 6's token (its SHA-256 keys the updates' signature), for the server and for hooks.py.
CRYPTOPAY_TOKEN="12345:fuzz_$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CRYPTOPAY_TOKEN
log "starting the server on 127.0.0.1:$port (database $db_name, Bot API stand-in on :$bot_port); log: $WORK/server.log"
SUBGATE_DEV_SECRETS="$secrets" DATABASE_URL="$db_url" BIND_ADDR="127.0.0.1:$port" \
    STRIPE_SECRET_KEY="sk_test_fuzz_not_a_real_key" STRIPE_WEBHOOK_SECRET="$STRIPE_WEBHOOK_SECRET" \
    MONOBANK_TOKEN="fuzz-monobank-token-0123456789" MONOBANK_API_URL="http://127.0.0.1:$bot_port" \
    CRYPTOPAY_TOKEN="$CRYPTOPAY_TOKEN" CRYPTOPAY_API_URL="http://127.0.0.1:$bot_port/cryptopay" \
    BCRYPT_COST=4 LOGIN_MAX_FAILURES=1000 TELEGRAM_BOT_TOKEN="123456:fuzz-token-for-the-stand-in-bot" TELEGRAM_API_URL="http://127.0.0.1:$bot_port" \
    "$ROOT/scripts/run-dev.sh" >"$WORK/server.log" 2>&1 &
server=$!
for _ in $(seq 1 1800); do # the build may take a while
    kill -0 "$server" 2>/dev/null || {
        tail -n 40 "$WORK/server.log" >&2
        die "make run exited before the server answered"
    }
    if grep -q '^================' "$WORK/server.log" 2>/dev/null; then break; fi
    sleep 0.2
done
grep -q '^================' "$WORK/server.log" || {
    tail -n 40 "$WORK/server.log" >&2
    die "the server did not answer in time"
}
set -a
# shellcheck disable=SC1090
. "$secrets"
set +a
base="http://127.0.0.1:$port"

# ------------------------------------------------------------------ the document
curl -sSf "$base/api/openapi.json" -o "$WORK/openapi.json"
log "validating the document: openapi-spec-validator (OpenAPI $(jq -r .openapi "$WORK/openapi.json"))"
"$VENV/bin/openapi-spec-validator" "$WORK/openapi.json" >&2 || die "the document is not valid OpenAPI"

# ------------------------------------------------------------------ seed
token="$(curl -sSf "$base/api/auth/login" -H 'Content-Type: application/json' \
    -d "$(jq -n --arg e "$ADMIN_EMAIL" --arg p "$ADMIN_PASSWORD" '{email: $e, password: $p}')" |
    jq -r .access_token)"
[[ -n "$token" && "$token" != null ]] || die "could not log in as $ADMIN_EMAIL"
api() { # METHOD PATH [JSON]
    curl -sSf -X "$1" "$base$2" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
        ${3:+-d "$3"}
}
for i in 1 2 3; do
    api POST /api/subscribers "{\"telegram_user_id\": 10000000$i, \"username\": \"fuzz$i\"}" >/dev/null
done
api POST /api/channels '{"telegram_chat_id": -1001000000001, "title": "Fuzz UAH", "price_minor": 19900,
    "currency": "UAH", "billing_period_days": 30, "grace_period_days": 3}' >/dev/null
api POST /api/channels '{"telegram_chat_id": -1001000000002, "title": "Fuzz Stars", "price_minor": 250,
    "currency": "XTR", "billing_period_days": 30, "seat_limit": 2}' >/dev/null
for s in 1 2 3; do
    for c in 1 2; do api POST /api/orders "{\"subscriber_id\": $s, \"channel_id\": $c}" >/dev/null; done
done
api POST /api/memberships '{"subscriber_id": 1, "channel_id": 1, "days": 30}' >/dev/null
api POST /api/plans '{"title": "Fuzz lifetime", "channel_ids": [1], "price_minor": 99900, "period_days": null}' >/dev/null
api POST /api/plans '{"title": "Fuzz trial", "channel_ids": [2], "kind": "trial", "period_days": 7}' >/dev/null
log "seeded 3 subscribers, 2 channels (with their default plans), 2 more plans, 6 orders, 1 membership"

# ------------------------------------------------------------------ fuzz
log "running schemathesis (at most ${FUZZ_MAX_EXAMPLES:-50} cases per operation and phase, ${FUZZ_MAX_TIME:-300} s)"
status=0
(
    # From target/fuzz: schemathesis keeps its cache in the working directory.
    cd "$WORK"
    SUBGATE_FUZZ_TOKEN="$token" SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$ROOT/scripts/fuzz" \
        "$VENV/bin/schemathesis" --config-file "$ROOT/scripts/fuzz/schemathesis.toml" run \
        "$base/api/openapi.json" \
        --url "$base" \
        --max-examples "${FUZZ_MAX_EXAMPLES:-50}" \
        --max-time "${FUZZ_MAX_TIME:-300}" \
        ${FUZZ_SEED:+--seed "$FUZZ_SEED"} \
        --report junit --report-dir "$WORK/report"
) || status=$?

# Belt and braces: a 5xx the fuzzer missed still leaves an error line in the server's log.
if grep -a -E '"level":"ERROR"| ERROR ' "$WORK/server.log" >"$WORK/errors.log"; then
    log "the server logged errors during the run:"
    head -n 20 "$WORK/errors.log" >&2
    status=1
fi
if ((status == 0)); then
    log "passed: no 5xx, every answer as the document describes"
else
    log "FAILED (exit $status); server log: $WORK/server.log"
fi
exit "$status"
