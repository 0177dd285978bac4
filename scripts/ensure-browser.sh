#!/usr/bin/env bash
# ensure-browser.sh — make sure headless Chromium and chromedriver are installed, for the staff
# console's browser test (tests/api/console/).
#
# Uses Debian's packages `chromium` and `chromium-driver`. When either program is missing and
# this runs as root with apt-get, it installs them (apt-get update first); otherwise it says
# what is missing and exits 1. The test itself fails with the same advice when they are
# missing: a missing browser never skips it silently.
set -euo pipefail

log() { printf '[ensure-browser] %s\n' "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1; }

if have chromedriver && { have chromium || have chromium-browser; }; then
    exit 0
fi

if [[ $(id -u) -ne 0 ]] || ! have apt-get; then
    log "ERROR: chromium and chromedriver are missing, and this is not root with apt-get;"
    log "install the Debian packages chromium and chromium-driver (or set CHROME_BIN and"
    log "CHROMEDRIVER) — the console's browser test fails without them"
    exit 1
fi

log "installing chromium and chromium-driver (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
if have chromedriver && have chromium; then
    log "installed: $(chromium --version 2>/dev/null || echo chromium)"
else
    log "ERROR: apt-get finished but chromium or chromedriver is still not on PATH"
    exit 1
fi
