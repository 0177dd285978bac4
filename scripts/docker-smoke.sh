#!/usr/bin/env bash
# docker-smoke.sh — build the image and prove that it runs (`make docker-smoke`).
#
# For any machine with a Docker engine, BuildKit and Compose (v2 `docker compose` or v1
# `docker-compose`). In order:
#  1. builds the image from the Dockerfile (tag $SMOKE_IMAGE) with BuildKit;
#  2. checks the image: it runs as a non-root user, declares a HEALTHCHECK, and carries no
#     compiler or cargo;
#  3. starts docker-compose.yml under a throwaway project name (subgate-smoke-<random>), with
#     throwaway secrets made here and the API published on a free loopback port that Docker
#     picks, so it clashes with nothing; none of the service's variables is taken from your
#     shell or from a .env file;
#  4. waits until the subgate container is healthy (its HEALTHCHECK: `subgate healthcheck`);
#  5. checks GET /readyz, a refused and an accepted staff login (POST /api/auth/login with the
#     ADMIN_EMAIL/ADMIN_PASSWORD given to compose), the token on a staff route, and that no
#     secret appears in the containers' logs;
#  6. whatever happened, removes the project's containers, network and volume (compose down -v);
#     on a failure it first prints the containers' state and the end of their logs.
# The image is kept, so the next run reuses its layers (the build's cache mounts keep the crate
# registry and target/ in any case). Ends with "docker-smoke: N passed, N failed".
#
# Environment:
#   DOCKER              docker CLI (default: `docker` when it can build with BuildKit, else
#                       /usr/bin/docker when that one can)
#   COMPOSE             compose command (default: "$DOCKER compose" when present, else
#                       docker-compose)
#   SMOKE_IMAGE         image tag to build and run (default subgate:smoke)
#   SMOKE_TIMEOUT_SECS  how long to wait for the container to become healthy (default 180)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[docker-smoke] %s\n' "$*" >&2; }
PASSED=0
FAILED=0
ok() {
    PASSED=$((PASSED + 1))
    log "ok: $*"
}
fail() {
    FAILED=$((FAILED + 1))
    log "FAILED: $*"
    exit 1
}
die() {
    log "ERROR: $*"
    exit 2
}
rand_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }
START=$SECONDS
since() { echo "$((SECONDS - ${1:-$START}))s"; }

# ------------------------------------------------------------------ tools
command -v curl >/dev/null 2>&1 || die "curl is needed (e.g. apt-get install curl)"

# A CLI builds with BuildKit when it has the buildx plugin, or when it predates Docker 23
# (those build with BuildKit themselves under DOCKER_BUILDKIT=1).
can_buildkit() {
    "$1" buildx version >/dev/null 2>&1 && return 0
    local version
    version="$("$1" version --format '{{.Client.Version}}' 2>/dev/null || true)"
    [[ "$version" =~ ^([0-9]+)\. ]] && ((BASH_REMATCH[1] < 23))
}
if [[ -z "${DOCKER:-}" ]]; then
    for candidate in docker /usr/bin/docker; do
        if command -v "$candidate" >/dev/null 2>&1 && can_buildkit "$candidate"; then
            DOCKER="$candidate"
            break
        fi
    done
    [[ -n "${DOCKER:-}" ]] ||
        die "no docker CLI that builds with BuildKit (install the buildx plugin, or set DOCKER)"
fi
export DOCKER_BUILDKIT=1
"$DOCKER" info >/dev/null 2>&1 || die "no Docker engine answers $DOCKER (is dockerd running?)"

if [[ -n "${COMPOSE:-}" ]]; then
    read -r -a COMPOSE_CMD <<<"$COMPOSE"
elif "$DOCKER" compose version >/dev/null 2>&1; then
    COMPOSE_CMD=("$DOCKER" compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE_CMD=(docker-compose)
else
    die "neither '$DOCKER compose' nor docker-compose is installed (or set COMPOSE)"
fi

IMAGE="${SMOKE_IMAGE:-subgate:smoke}"
TIMEOUT="${SMOKE_TIMEOUT_SECS:-180}"
PROJECT="subgate-smoke-$(rand_hex 4)"
log "using $DOCKER ($("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?') engine)," \
    "${COMPOSE_CMD[*]}, image $IMAGE, project $PROJECT"

# ------------------------------------------------------------------ throwaway configuration
# Every variable docker-compose.yml interpolates comes from this file only: unset them here so
# the caller's shell cannot override it, and name the file so a .env next to the compose file
# is not read. The secrets exist for this run only; none is printed.
while read -r var; do
    unset "$var"
done < <(grep -oE '\$\{[A-Z_][A-Z0-9_]*' docker-compose.yml | cut -c3- | sort -u)
WORK="$(mktemp -d)"
ENV_FILE="$WORK/smoke.env"
ADMIN_EMAIL="smoke-admin@example.com"
ADMIN_PASSWORD="smoke-$(rand_hex 12)"
JWT_SECRET="$(rand_hex 32)"
POSTGRES_PASSWORD="$(rand_hex 16)"
SECRETS=("$ADMIN_PASSWORD" "$JWT_SECRET" "$POSTGRES_PASSWORD")
(
    umask 077
    cat >"$ENV_FILE" <<EOF
POSTGRES_PASSWORD=$POSTGRES_PASSWORD
JWT_SECRET=$JWT_SECRET
ADMIN_EMAIL=$ADMIN_EMAIL
ADMIN_PASSWORD=$ADMIN_PASSWORD
SUBGATE_IMAGE=$IMAGE
SUBGATE_PORT=127.0.0.1:
EOF
)

compose() {
    "${COMPOSE_CMD[@]}" --env-file "$ENV_FILE" -f "$ROOT/docker-compose.yml" -p "$PROJECT" "$@"
}

STARTED=0
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if ((STARTED)); then
        if ((status != 0)); then
            log "state of the containers:"
            compose ps >&2 || true
            log "their last log lines:"
            compose logs --no-color --tail=60 >&2 || true
        fi
        log "tearing down project $PROJECT (compose down -v)"
        compose down -v --remove-orphans >&2 || log "compose down failed; remove $PROJECT by hand"
    fi
    rm -rf "$WORK"
    if ((status != 0 && FAILED == 0)); then
        FAILED=1
    fi
    log "finished in $(since)"
    echo "docker-smoke: $PASSED passed, $FAILED failed"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ 1. build
t=$SECONDS
log "building $IMAGE (BuildKit; the first build compiles every dependency in release mode)"
"$DOCKER" build -t "$IMAGE" "$ROOT" || fail "docker build"
ok "image built in $(since "$t")"

# ------------------------------------------------------------------ 2. the image
user="$("$DOCKER" image inspect -f '{{.Config.User}}' "$IMAGE")"
[[ -n "$user" && "${user%%:*}" != 0 && "${user%%:*}" != root ]] ||
    fail "the image runs as root (USER '$user')"
uid="$("$DOCKER" run --rm --entrypoint id "$IMAGE" -u)"
[[ "$uid" != 0 ]] || fail "the container's process runs as uid 0"
ok "runs as a non-root user (USER $user, uid $uid)"

health="$("$DOCKER" image inspect -f '{{if .Config.Healthcheck}}{{json .Config.Healthcheck.Test}}{{end}}' "$IMAGE")"
[[ "$health" == *'"subgate","healthcheck"'* ]] ||
    fail "the image's HEALTHCHECK is not \`subgate healthcheck\` (got: ${health:-none})"
ok "HEALTHCHECK $health"

# shellcheck disable=SC2016 # $t expands inside the container's shell
tools="$("$DOCKER" run --rm --entrypoint /bin/sh "$IMAGE" -c \
    'for t in cc gcc c++ ld as make cargo rustc; do command -v "$t" || true; done')"
[[ -z "$tools" ]] || fail "build tools in the runtime image: $(echo "$tools" | tr '\n' ' ')"
size="$("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE")"
ok "no compiler or cargo in the runtime image ($((size / 1024 / 1024)) MiB)"

# ------------------------------------------------------------------ 3. compose up
t=$SECONDS
STARTED=1
compose up -d --no-build >&2 || fail "compose up"
cid="$(compose ps -q subgate)"
[[ -n "$cid" ]] || fail "compose started no subgate container"

# ------------------------------------------------------------------ 4. healthy
deadline=$((SECONDS + TIMEOUT))
while :; do
    read -r state health restarts < <("$DOCKER" inspect -f \
        '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.RestartCount}}' "$cid")
    case "$health" in
    healthy) break ;;
    unhealthy) fail "the subgate container became unhealthy" ;;
    none) fail "the subgate container has no health check" ;;
    esac
    if [[ "$state" == exited || "$state" == dead || "$restarts" != 0 ]]; then
        fail "the subgate container stopped (state $state, restarts $restarts)"
    fi
    ((SECONDS < deadline)) ||
        fail "the subgate container was not healthy after ${TIMEOUT}s (health: ${health:-?})"
    sleep 2
done
ok "compose up: subgate healthy after $(since "$t")"

# ------------------------------------------------------------------ 5. the API
published="$(compose port subgate 8080 | tail -n 1 | tr -d '\r')"
port="${published##*:}"
[[ "$port" =~ ^[0-9]+$ ]] || fail "cannot tell the published port (compose port said '$published')"
BASE="http://127.0.0.1:$port"
log "the API is published at $BASE"

# request METHOD PATH [curl args...]: sets STATUS and BODY.
request() {
    local method="$1" path="$2"
    shift 2
    local out
    out="$(curl -sS --max-time 10 -o "$WORK/body" -w '%{http_code}' -X "$method" "$@" "$BASE$path")" ||
        fail "$method $path: no answer"
    STATUS="$out"
    BODY="$(cat "$WORK/body")"
}

request GET /readyz
[[ "$STATUS" == 200 && "$BODY" == *'"status":"ready"'* ]] ||
    fail "GET /readyz answered $STATUS: $BODY"
ok "GET /readyz: 200 $BODY"

request POST /api/auth/login -H 'content-type: application/json' \
    --data-binary "{\"email\":\"$ADMIN_EMAIL\",\"password\":\"not-the-password\"}"
[[ "$STATUS" == 401 ]] || fail "a login with a wrong password answered $STATUS: $BODY"
ok "login with a wrong password: 401"

request POST /api/auth/login -H 'content-type: application/json' \
    --data-binary "{\"email\":\"$ADMIN_EMAIL\",\"password\":\"$ADMIN_PASSWORD\"}"
[[ "$STATUS" == 200 ]] || fail "the staff login answered $STATUS: $BODY"
token="$(grep -oE '"access_token" *: *"[^"]+"' <<<"$BODY" | sed -E 's/.*"([^"]+)"$/\1/')" || true
[[ -n "$token" && "$BODY" == *'"token_type":"Bearer"'* ]] ||
    fail "the staff login's body has no bearer token"
ok "staff login as ADMIN_EMAIL: 200 with a bearer token"

request GET /api/channels
[[ "$STATUS" == 401 ]] || fail "GET /api/channels without a token answered $STATUS"
request GET /api/channels -H "authorization: Bearer $token"
[[ "$STATUS" == 200 && "$BODY" == *'"items"'* ]] ||
    fail "GET /api/channels with the token answered $STATUS: $BODY"
ok "the token opens a staff route (GET /api/channels: 200; 401 without it)"

compose logs --no-color >"$WORK/logs" 2>&1 || fail "compose logs"
for secret in "${SECRETS[@]}" "$token"; do
    if grep -qF -- "$secret" "$WORK/logs"; then
        fail "a secret appears in the containers' logs"
    fi
done
ok "no secret or token in the containers' logs ($(wc -l <"$WORK/logs") lines)"
