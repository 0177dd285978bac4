#!/usr/bin/env bash
# docs-walkthrough.sh — run the docs' shell walk-throughs against a live server
# (`make docs-test`; CI runs it after `make test`).
#
# A walk-through block is a fenced block whose info string is `sh walkthrough`
# (``` at the start of a line); any other block, e.g. a plain ```sh one, is an
# illustration and is not run. The blocks of one file form one walk-through:
# they run in order in one bash process (so a variable set in one block is
# seen by the next) with `set -euo pipefail`. Files run in this order:
# README.md, then the docs/*.md files named in DOC_ORDER below, then any other
# docs/*.md holding walk-through blocks, by name.
#
# Every `curl` in a walk-through runs with --fail-with-body, so a non-2xx
# answer fails the run — except a curl that prints the status itself (-i /
# --include or -w / --write-out): those are the docs' error examples.
#
# What it does, like `make run` on a fresh database:
#  1. installs curl, jq or openssl when one is missing (apt-get, as root);
#  2. finds PostgreSQL (scripts/ensure-postgres.sh) and creates a fresh
#     database subgate_docs_<time>_<random> (dropped at the end);
#  3. prepares a scratch checkout in target/docs-walkthrough/ (its own
#     target/dev-secrets.env; target/debug is this checkout's), so the blocks'
#     `. target/dev-secrets.env` and `target/debug/subgate` work verbatim and
#     your own target/dev-secrets.env is left alone;
#  4. starts scripts/run-dev.sh there on a free port (DOCS_TEST_PORT to choose
#     one), with none of the service's variables inherited from your shell;
#  5. runs the walk-throughs from the scratch directory, then stops the server.
#
# Exits non-zero when a block fails (the failing file and block are named).
set -euo pipefail

log() { printf '[docs-walkthrough] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/pg-lib.sh
. "$ROOT/scripts/pg-lib.sh"
cd "$ROOT"
WORK="$ROOT/target/docs-walkthrough"
DOC_ORDER=(api.md payments.md sweep.md telegram.md effects.md deployment.md)

# ------------------------------------------------------------------ tools
missing=()
for tool in curl jq openssl; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "installing ${missing[*]}: apt-get update && apt-get install -y ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update >&2
        apt-get install -y "${missing[@]}" >&2
    else
        die "the walk-throughs need ${missing[*]}; install them (e.g. apt-get install ${missing[*]})"
    fi
fi

# ------------------------------------------------------------------ extract
# Prints the walk-through of one file as a bash script body (nothing when the
# file has no walk-through block).
extract() { # $1 = file (relative to ROOT)
    awk -v file="$1" '
        /^```/ {
            if (inblock) { inblock = 0; next }
            if (fence) { fence = 0; next }
            if ($0 ~ /^```sh[ \t]+walkthrough[ \t]*$/) {
                inblock = 1
                printf "printf \047\\n==> %s:%d\\n\047 >&2\n", file, NR + 1
                next
            }
            fence = 1
            next
        }
        inblock { print }
    ' "$1"
}

files=(README.md)
for f in "${DOC_ORDER[@]}"; do files+=("docs/$f"); done
for f in docs/*.md; do
    case " ${files[*]} " in *" $f "*) ;; *) files+=("$f") ;; esac
done
walks=()
for f in "${files[@]}"; do
    [[ -f "$f" ]] || continue
    if [[ -n "$(extract "$f")" ]]; then walks+=("$f"); fi
done
((${#walks[@]})) || die "no walk-through blocks found"
log "walk-throughs: ${walks[*]}"

# ------------------------------------------------------------------ database
# The admin URL `make test` uses: SUBGATE_TEST_DATABASE_URL, else what
# ensure-postgres.sh finds or starts (ignoring a DATABASE_URL of your shell).
create_scratch_database subgate_docs

server=""
cleanup() {
    if [[ -n "$server" ]] && kill -0 "$server" 2>/dev/null; then
        kill -TERM "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    "$PSQL" "$admin_url" -X -q -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 ||
        log "could not drop database $db_name"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ scratch checkout
rm -rf "$WORK"
mkdir -p "$WORK/target"
ln -s "${CARGO_TARGET_DIR:-$ROOT/target}/debug" "$WORK/target/debug"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port="${DOCS_TEST_PORT:-}"
if [[ -z "$port" ]]; then
    port=$((18100 + RANDOM % 800))
    while ! port_free "$port"; do port=$((port + 1)); done
fi
port_free "$port" || die "port $port is taken (DOCS_TEST_PORT)"

# None of the service's variables (the table in src/config/mod.rs) leak in from
# the caller's shell: the walk-throughs must work from `make run`'s defaults.
config_vars=()
# shellcheck disable=SC2016 # the backticks are the table's, matched literally
while IFS= read -r name; do config_vars+=("$name"); done < <(
    sed -n 's/^\/\/! | `\([A-Z_]*\)`\( \/ `\([A-Z_]*\)`\)\{0,1\} |.*/\1 \3/p' src/config/mod.rs | tr ' ' '\n' | sed '/^$/d'
)
((${#config_vars[@]} > 10)) || die "could not read the variable table of src/config/mod.rs"
for name in "${config_vars[@]}"; do unset "$name"; done

# ------------------------------------------------------------------ server
log "starting the server (make run) on 127.0.0.1:$port, database $db_name; log: $WORK/server.log"
SUBGATE_DEV_SECRETS="$WORK/target/dev-secrets.env" DATABASE_URL="$db_url" \
    BIND_ADDR="127.0.0.1:$port" "$ROOT/scripts/run-dev.sh" >"$WORK/server.log" 2>&1 &
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
if grep -q 'NOT APPLIED' "$WORK/server.log"; then
    die "make run says the admin password was not applied on a fresh database"
fi

# ------------------------------------------------------------------ run
# shellcheck disable=SC2016 # shell code for the walk-throughs' own shell, expanded there
prelude='set -euo pipefail
# Fail on any non-2xx answer, unless the command prints the status itself.
curl() {
    local arg
    for arg in "$@"; do
        case "$arg" in
        --include | --write-out) command curl "$@"; return ;;
        --*) ;;
        -*[iw]*) command curl "$@"; return ;;
        esac
    done
    command curl --fail-with-body "$@"
}
'
failed=""
for f in "${walks[@]}"; do
    script="$WORK/$(basename "$f" .md).walkthrough.sh"
    {
        printf '%s\n' "$prelude"
        extract "$f"
    } >"$script"
    log "running $f"
    if ! (cd "$WORK" && bash "$script"); then
        printf '\n' >&2
        log "FAILED: $f (the last ==> line above names the block; script: $script)"
        failed=1
        break
    fi
done

if [[ -n "$failed" ]]; then
    log "server log (last lines):"
    tail -n 30 "$WORK/server.log" >&2
    exit 1
fi
log "all walk-throughs passed: ${walks[*]}"
