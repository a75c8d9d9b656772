#!/usr/bin/env bash
# install-deps.sh - installs pgpace's build, test and runtime packages from Debian (as root).
# Skips apt entirely when everything is already present, so repeated runs are quick.
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config
      libpq-dev libuv1-dev libcurl4-openssl-dev libssl-dev libinih-dev libcmocka-dev
      libhttp-parser-dev libjansson-dev postgresql-15 postgresql-client-15 ca-certificates
      prometheus clang libclang-rt-14-dev  # promtool checks /metrics; clang: libFuzzer
      openssl  # the command line verifies Ed25519 (v1a) signatures in dispatch_ed25519
      # browser_status_page drives Debian's headless chromium over the DevTools pipe; with
      # --no-install-recommends nothing pulls in a font, and without one the page's text
      # (what the test reads and the README screenshot shows) renders as empty boxes.
      chromium fonts-dejavu-core
      # dispatch_clock steps the dispatcher's wall clock (LD_PRELOAD, that process only).
      libfaketime
      # the man pages are scdoc sources built at build time; the install test renders them
      # with groff -ww (groff-base) and finds them with man -w (man-db).
      scdoc groff-base man-db
      # dispatch_pgbouncer starts its own pgbouncer per test (session, transaction and statement
      # pooling); Debian's service on 6432, if the package starts it, is never used.
      pgbouncer
      # api checks every answer of the management API against src/api/openapi.json (JSON
      # Schema 2020-12, tests/api/openapi_check.py).
      python3-jsonschema)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-deps.sh: missing packages (${missing[*]}); run as root or install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's postgresql package starts a default cluster on 5432; pgpace never uses it.
