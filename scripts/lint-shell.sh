#!/usr/bin/env bash
# lint-shell.sh — ShellCheck over the project's shell scripts (`make shellcheck`, and CI).
#
# Checks every script under scripts/ and .ci/run at ShellCheck's default severity; a finding
# fails the run. When shellcheck is missing and this runs as root with apt-get, it installs
# Debian's package `shellcheck` (apt-get update first); otherwise it says so and exits 1.
# Deliberate exceptions are written as `# shellcheck disable=SCxxxx # why` next to the line.
set -euo pipefail

log() { printf '[shellcheck] %s\n' "$*" >&2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! command -v shellcheck >/dev/null 2>&1; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        log "ERROR: shellcheck is missing, and this is not root with apt-get;"
        log "install the Debian package shellcheck (or ShellCheck from your distribution)"
        exit 1
    fi
    log "installing shellcheck (Debian package)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
fi

mapfile -t files < <(find scripts -type f -name '*.sh' | sort)
files+=(.ci/run)
log "$(shellcheck --version | sed -n 's/^version: /shellcheck /p'): ${#files[@]} scripts"
shellcheck --external-sources "${files[@]}"
log "clean"
