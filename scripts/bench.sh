#!/usr/bin/env bash
# bench.sh — `make bench`: the payment path, re-deliveries and the sweep, measured in one run
# against references on the same PostgreSQL, ending with one table of figures and ratios
# (docs/benchmarks.md explains it and keeps the figures measured so far).
#
# Gets an admin URL like scripts/test.sh (SUBGATE_TEST_DATABASE_URL from the environment, else
# scripts/ensure-postgres.sh), builds both benchmarks (release profile), then runs
#   1. benches/sweep.rs     the sweep of SWEEP_BENCH_ROWS overdue memberships (default below)
#                           against set-based statements with the same writes;
#   2. benches/payments     a real server on its own database in a private PostgreSQL cluster
#                           with ssl = on (target/bench/subgate-pg-<run>), driven by the load
#                           generator, and the pgbench references, each without TLS and with
#                           TLS; prints the summary table, with the sweep's rows, and leaves it
#                           in target/bench/summary.md;
#   3. benches/stats.rs     GET /api/stats/* on 1M memberships and 5M payments (made by SQL),
#                           each endpoint's median and slowest latency;
#   4. benches/access       time from a payment to its grant message at a fake Bot API that
#                           enforces Telegram's limits, behind queued invoices, and a burst.
#   5. benches/bot_storm.rs `/start` and buy-press storms at 100 webhook connections through a
#                           real server, with the rows checked after (BOT_BENCH_ARGS sizes it,
#                           e.g. '--duration 5'; BENCH_SKIP_BOT=1 leaves it out).
#   6. benches/broadcast    a broadcast at Telegram's free rate through a `kill -9` of the
#                           server, and a paid broadcast within its Stars budget, against the
#                           fake Bot API (BROADCAST_BENCH_FREE_RECIPIENTS, default 3000, and
#                           BROADCAST_BENCH_RECIPIENTS, default 100000, size it;
#                           BENCH_SKIP_BROADCAST=1 leaves it out).
#   7. benches/door.rs      1,000 join request queries released together at a Mini App chat
#                           through a real server, each timed to its answer in the webhook's
#                           reply, twice (DOOR_BENCH_ARGS sizes it, e.g. '--requests 500';
#                           BENCH_SKIP_DOOR=1 leaves it out).
# Arguments go to the payment benchmark, e.g.
#   make bench ARGS='--connections 32 --duration 30'      scripts/bench.sh --help
# SWEEP_BENCH_ROWS / SWEEP_BENCH_NAIVE_ROWS / SWEEP_BENCH_PROBE size the sweep; BENCH_SKIP_SWEEP=1
# leaves it out; BENCH_SKIP_PAYMENTS=1 leaves the payment benchmark out. STATS_BENCH_SCALE / STATS_BENCH_CALLS size the statistics' run;
# BENCH_SKIP_STATS=1 leaves it out. Everything the run starts — the benchmark programs, the server, pgbench — is
# listed in a pid file and stopped, the private cluster stopped and removed, and this run's
# databases dropped, however the script ends.
# Exits non-zero when a benchmark failed.
set -euo pipefail

log() { printf '[bench] %s\n' "$*" >&2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/pg-lib.sh
. "$ROOT/scripts/pg-lib.sh"
cd "$ROOT"

# The sweep's default size here: large enough for its ratio to mean something, small enough
# for the run without the broadcasts to stay well under ten minutes on a 2-core machine.
: "${SWEEP_BENCH_ROWS:=300000}"
export SWEEP_BENCH_ROWS

if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
    exec cargo bench --quiet --bench payments -- --help
fi

if [[ -n "${SUBGATE_TEST_DATABASE_URL:-}" ]]; then
    log "SUBGATE_TEST_DATABASE_URL is set; using it as is"
else
    SUBGATE_TEST_DATABASE_URL="$("$ROOT/scripts/ensure-postgres.sh" | tail -n 1)"
    [[ -n "$SUBGATE_TEST_DATABASE_URL" ]] || {
        log "ERROR: ensure-postgres.sh printed no URL"
        exit 1
    }
fi
export SUBGATE_TEST_DATABASE_URL

# A tag for this run's databases (subgate_bench_*_<tag>) and pid file.
SUBGATE_BENCH_RUN="b$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
export SUBGATE_BENCH_RUN
SUBGATE_BENCH_RESULTS="$ROOT/target/bench"
export SUBGATE_BENCH_RESULTS
mkdir -p "$SUBGATE_BENCH_RESULTS"
rm -f "$SUBGATE_BENCH_RESULTS/sweep.tsv" "$SUBGATE_BENCH_RESULTS/payments.tsv" \
    "$SUBGATE_BENCH_RESULTS/stats.tsv" "$SUBGATE_BENCH_RESULTS/access.tsv" \
    "$SUBGATE_BENCH_RESULTS/broadcast.tsv" "$SUBGATE_BENCH_RESULTS/door.tsv" \
    "$SUBGATE_BENCH_RESULTS/summary.md"
SUBGATE_BENCH_PIDFILE="$SUBGATE_BENCH_RESULTS/pids.$SUBGATE_BENCH_RUN"
export SUBGATE_BENCH_PIDFILE
: >"$SUBGATE_BENCH_PIDFILE"

# 1,000 idle connections need that many descriptors in the server and the load generator.
if [[ "$(ulimit -n)" != unlimited && "$(ulimit -n)" -lt 4096 ]]; then
    ulimit -n "$(ulimit -Hn | sed 's/unlimited/4096/')" 2>/dev/null || true
    ulimit -n 4096 2>/dev/null || true
fi

# Explicit `return 0`s: in a trap, a bare `return` returns the status the trap interrupted.

child=""
# shellcheck disable=SC2317 # runs as the EXIT trap
cleanup() {
    # Best effort to the end: one failing step must not leave the rest undone.
    set +e
    local pid pids=() psql names name
    # The payment benchmark's private cluster (benches/payments/cluster.rs), if the run was
    # interrupted before the benchmark stopped it: an immediate shutdown (SIGQUIT to its
    # postmaster), then its files.
    local cluster="$SUBGATE_BENCH_RESULTS/subgate-pg-$SUBGATE_BENCH_RUN" postmaster
    if [[ -d "$cluster" ]]; then
        postmaster="$(head -n 1 "$cluster/data/postmaster.pid" 2>/dev/null || true)"
        if [[ "$postmaster" =~ ^[0-9]+$ ]] && kill -0 "$postmaster" 2>/dev/null; then
            log "stopping the private PostgreSQL cluster $cluster (pid $postmaster)"
            kill -QUIT "$postmaster" 2>/dev/null || true
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                kill -0 "$postmaster" 2>/dev/null || break
                sleep 0.5
            done
        fi
        rm -rf "$cluster"
    fi
    [[ -n "$child" ]] && pids+=("$child")
    if [[ -f "$SUBGATE_BENCH_PIDFILE" ]]; then
        while IFS= read -r pid; do
            [[ "$pid" =~ ^[0-9]+$ ]] && pids+=("$pid")
        done <"$SUBGATE_BENCH_PIDFILE"
    fi
    # Only processes of this run that are still there (and still what we started).
    local alive=()
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null &&
            grep -qa -e subgate -e pgbench -e payments -e sweep -e stats -e access -e bot_storm -e broadcast -e door -e cargo "/proc/$pid/cmdline" 2>/dev/null; then
            alive+=("$pid")
        fi
    done
    if ((${#alive[@]})); then
        log "stopping what this run started: ${alive[*]}"
        kill -TERM "${alive[@]}" 2>/dev/null || true
        sleep 2
        for pid in "${alive[@]}"; do
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
        done
    fi
    rm -f "$SUBGATE_BENCH_PIDFILE"
    psql="$(find_psql)"
    [[ -n "$psql" ]] || return 0
    names="$("$psql" "$SUBGATE_TEST_DATABASE_URL" -X -qAt -c \
        "SELECT datname FROM pg_database
          WHERE datname LIKE 'subgate\\_bench\\_%\\_${SUBGATE_BENCH_RUN}'" 2>/dev/null)" || return 0
    while IFS= read -r name; do
        [[ -n "$name" ]] || continue
        "$psql" "$SUBGATE_TEST_DATABASE_URL" -X -q -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" \
            >/dev/null 2>&1 && log "dropped $name"
    done <<<"$names"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# In the background and waited for, so a signal reaches the trap at once (bash runs traps only
# between foreground commands).
run() {
    "$@" &
    child=$!
    wait "$child"
    local status=$?
    child=""
    return "$status"
}

started=$SECONDS
log "building the benchmarks (release profile)"
run cargo bench --no-run --bench payments --bench sweep --bench stats --bench access --bench bot_storm \
    --bench broadcast --bench door
log "built in $((SECONDS - started)) s"

status=0
if [[ "${BENCH_SKIP_SWEEP:-0}" != 1 ]]; then
    step=$SECONDS
    log "sweep benchmark: $SWEEP_BENCH_ROWS overdue memberships"
    run cargo bench --quiet --bench sweep || status=$?
    log "sweep benchmark: $((SECONDS - step)) s"
fi
if [[ "${BENCH_SKIP_PAYMENTS:-0}" != 1 ]]; then
    step=$SECONDS
    log "payment benchmark: cargo bench --bench payments -- $*"
    run cargo bench --quiet --bench payments -- "$@" || status=$?
    log "payment benchmark: $((SECONDS - step)) s"
fi
if [[ "${BENCH_SKIP_STATS:-0}" != 1 ]]; then
    step=$SECONDS
    log "statistics benchmark: 1M memberships, 5M payments (scale ${STATS_BENCH_SCALE:-1})"
    run cargo bench --quiet --bench stats || status=$?
    log "statistics benchmark: $((SECONDS - step)) s"
fi
# Access: time from a payment's 200 to its grant message, the same behind 10,000 queued
# invoices, and a burst of payments granted at Telegram's limits (a fake Bot API enforcing
# them). ACCESS_BENCH_SEQUENTIAL / ACCESS_BENCH_QUEUED / ACCESS_BENCH_BEHIND /
# ACCESS_BENCH_BURST size it; BENCH_SKIP_ACCESS=1 leaves it out.
if [[ "${BENCH_SKIP_ACCESS:-0}" != 1 ]]; then
    step=$SECONDS
    log "access benchmark: time to access and a burst of ${ACCESS_BENCH_BURST:-3000} payments"
    run cargo bench --quiet --bench access || status=$?
    log "access benchmark: $((SECONDS - step)) s"
fi
# Bot storms: /start and buy presses through the Telegram webhook (benches/bot_storm.rs).
if [[ "${BENCH_SKIP_BOT:-0}" != 1 ]]; then
    step=$SECONDS
    read -r -a bot_args <<<"${BOT_BENCH_ARGS:-}"
    log "bot storm benchmark: cargo bench --bench bot_storm -- ${bot_args[*]}"
    run cargo bench --quiet --bench bot_storm -- "${bot_args[@]}" || status=$?
    log "bot storm benchmark: $((SECONDS - step)) s"
fi
# Broadcasts: a free one through a crash of the server (its recipients, payments meanwhile timed
# to their grants) and a paid one, at a fake Bot API enforcing Telegram's limits; fails when a
# goal is missed (benches/broadcast/main.rs). The free one runs at 28 messages/s, so its size is
# its own: 3,000 take about 2 minutes, 100,000 would take an hour.
# BROADCAST_BENCH_FREE_RECIPIENTS / BROADCAST_BENCH_RECIPIENTS / BROADCAST_BENCH_MAX_STARS size
# it; BENCH_SKIP_BROADCAST=1 leaves it out.
: "${BROADCAST_BENCH_FREE_RECIPIENTS:=3000}"
: "${BROADCAST_BENCH_RECIPIENTS:=100000}"
export BROADCAST_BENCH_FREE_RECIPIENTS BROADCAST_BENCH_RECIPIENTS
if [[ "${BENCH_SKIP_BROADCAST:-0}" != 1 ]]; then
    step=$SECONDS
    log "broadcast benchmark: $BROADCAST_BENCH_FREE_RECIPIENTS recipients through a crash, $BROADCAST_BENCH_RECIPIENTS paid"
    run cargo bench --quiet --bench broadcast || status=$?
    log "broadcast benchmark: $((SECONDS - step)) s"
fi
# The door: join request queries answered in the webhook's reply, 1,000 released together,
# twice (benches/door.rs); fails when an answer is wrong or missing, reports p50/p99/max.
if [[ "${BENCH_SKIP_DOOR:-0}" != 1 ]]; then
    step=$SECONDS
    read -r -a door_args <<<"${DOOR_BENCH_ARGS:-}"
    log "door benchmark: cargo bench --bench door -- ${door_args[*]}"
    run cargo bench --quiet --bench door -- "${door_args[@]}" || status=$?
    log "door benchmark: $((SECONDS - step)) s"
fi
log "whole run $((SECONDS - started)) s"
exit "$status"
