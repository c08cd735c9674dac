#!/usr/bin/env bash
# Run pytest; "no tests collected" (exit 5) is a failure, not a pass.
set -uo pipefail
"$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$rc"
