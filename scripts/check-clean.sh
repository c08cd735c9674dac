#!/usr/bin/env bash
# Run CI's entry point on a fresh clone of the committed tree (developer check before pushing).
# Usage: scripts/check-clean.sh [ref]   (default HEAD; reuses /tmp/rsi-ci-venv between runs)
set -euo pipefail
ref="${1:-HEAD}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
dest="$(mktemp -d /tmp/rsi-ci.XXXXXX)"
git clone -q "$repo" "$dest/src"
cd "$dest/src"
git checkout -q "$ref"
time .ci/run
