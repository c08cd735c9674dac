#!/usr/bin/env bash
# Make sure the servers the tests start for real are installed: redis-server and PostgreSQL, and the
# headless browser of the console tests: Debian's chromium (driven by Playwright at /usr/bin/chromium).
# As root, install missing ones from Debian's packages; otherwise say how.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || need+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
[ -x /usr/bin/chromium ] || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "provision: installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need[@]}" >/tmp/rsi-apt.log 2>&1 || {
    apt-get update -q >>/tmp/rsi-apt.log 2>&1 && apt-get install -y -q "${need[@]}" >>/tmp/rsi-apt.log 2>&1
  } || { tail -20 /tmp/rsi-apt.log; exit 1; }
  # the Debian packages start system services; the tests start their own private servers
  (service redis-server stop || true) >/dev/null 2>&1
else
  echo "provision: missing ${need[*]}." >&2
  echo "  install them with: sudo apt-get install -y ${need[*]}  (or put them on PATH)" >&2
  exit 1
fi
