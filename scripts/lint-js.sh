#!/usr/bin/env bash
# lint-js.sh — ESLint over the pages' JavaScript, the console's and the Mini App's (`make lint-js`,
# and CI).
#
# ESLint comes from the npm registry at the versions pinned in scripts/eslint/package-lock.json,
# installed with `npm ci` into target/eslint/ (again only when the lock file changes); its flat
# config is scripts/eslint/eslint.config.mjs. Only our own code is linted
# (src/api/console/assets/*.js and src/api/app_page/*.js), not the vendored uPlot under
# src/api/console/assets/vendor/. A finding, warning
# or error, fails the run.
#
# When node or npm is missing and this runs as root with apt-get, it installs Debian's nodejs
# and npm (apt-get update first); otherwise it says so and exits 1. ESLint 9 runs on Node 18.18
# or later (Debian 12's nodejs is 18.20).
set -euo pipefail

log() { printf '[lint-js] %s\n' "$*" >&2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        log "ERROR: node or npm is missing, and this is not root with apt-get;"
        log "install Node.js 18.18 or later with npm (Debian packages nodejs and npm)"
        exit 1
    fi
    log "installing nodejs and npm (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

SRC=scripts/eslint
DEST=target/eslint
mkdir -p "$DEST"
# The installed tree matches the lock file it was made from; a changed lock reinstalls.
if ! cmp -s "$SRC/package-lock.json" "$DEST/package-lock.json" || [[ ! -x $DEST/node_modules/.bin/eslint ]]; then
    log "installing ESLint from $SRC/package-lock.json into $DEST (npm ci)"
    rm -rf "$DEST/node_modules"
    cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
    (cd "$DEST" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
# The config sits beside the node_modules its imports resolve from.
cp "$SRC/eslint.config.mjs" "$DEST/eslint.config.mjs"

mapfile -t files < <(find src/api/console/assets src/api/app_page -maxdepth 1 -type f -name '*.js' | sort)
log "eslint $("$DEST/node_modules/.bin/eslint" --version | tr -d v) on node $(node --version | tr -d v): ${files[*]}"
# With --config, paths and the config's `files` globs are relative to the working directory (the repository).
"$DEST/node_modules/.bin/eslint" --config "$DEST/eslint.config.mjs" --max-warnings 0 --no-warn-ignored "${files[@]}"
log "clean"
