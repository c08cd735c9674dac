#!/usr/bin/env bash
# Install rsi-worker into a new virtualenv with the turn checks compiled (docs/dev/compiled.md):
# the container image's build stage (deploy/Dockerfile) runs it; so can any host.
#   scripts/install.sh VENV [EXTRAS]      e.g. scripts/install.sh /opt/rsi flower,otel
# Needs gcc and the Python headers. mypy (mypyc) lives in a throw-away build venv, never in VENV.
# Ends by checking that VENV imports every listed module compiled (fails otherwise).
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 VENV [EXTRAS]" >&2; exit 2; }
venv=$1
extras=${2:-}
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}

"$python" -m venv "$venv"
"$venv/bin/pip" install -q "$src${extras:+[$extras]}"

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$python" -m venv "$build/venv"
mypy_req=$("$python" -c 'import sys, tomllib
dev = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["dev"]
print(next(r for r in dev if r.split(">")[0].split("=")[0] == "mypy"))' "$src/pyproject.toml")
"$build/venv/bin/pip" install -q "$mypy_req" setuptools
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$build/venv/bin/python" "$src/scripts/build_compiled.py" --root "$site"

cd /  # import the installed copy, never a checkout in the working directory
PURE_PYTHON_CHECKS= "$venv/bin/python" -c 'import importlib, sys
from rsi_common.compiled import COMPILED_MODULES, is_compiled
source = [m for m in COMPILED_MODULES if not is_compiled(importlib.import_module(m))]
sys.exit(f"not compiled in the install: {source}" if source else 0)'
