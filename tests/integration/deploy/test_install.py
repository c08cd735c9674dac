"""``scripts/install.sh`` — the container image's build stage (deploy/Dockerfile) — installs the
package into a new virtualenv with the turn checks compiled (docs/dev/compiled.md), and that
install answers the hostile worlds exactly as the checkout does.

Runs the script for real (pip from the machine's package index, mypyc, gcc): ~1 minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rsi_common.compiled import COMPILED_MODULES
from tests.unit.perf.test_compiled_checks import _outcome
from tests.unit.perf.test_turn_checks_equiv import _docs

REPO = Path(__file__).resolve().parents[3]

_ANSWER = """
import json, sys
from rsi_common import world
from rsi_common.world import finalize_world
out = [world.__file__]
for doc in json.load(sys.stdin):
    try:
        out.append(["ok", json.dumps(finalize_world(doc), ensure_ascii=False, default=repr)])
    except Exception as exc:
        out.append([type(exc).__name__, str(exc)])
print(json.dumps(out))
"""


def _json_docs() -> list[Any]:
    """The hostile worlds that JSON can carry (cycles and host objects cannot), as JSON gives them."""
    out = []
    for doc in _docs():
        try:
            out.append(json.loads(json.dumps(doc)))
        except (TypeError, ValueError):
            continue
    return out


def test_the_install_script_compiles_the_checks_and_they_answer_as_the_checkout(tmp_path: Path) -> None:
    venv = tmp_path / "opt-rsi"
    # The installed copy, never this checkout: no PYTHONPATH, no settings, no pure-source switch.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RSI_", "PURE_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["PYTHON"] = str(Path(sys.base_prefix) / "bin" / "python3")
    done = subprocess.run([str(REPO / "scripts" / "install.sh"), str(venv)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]  # the script ends by checking the import itself
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    leaves = {name.rpartition(".")[2] for name in COMPILED_MODULES} | {"_checks__mypyc"}
    assert {p.name.split(".")[0] for p in (site / "rsi_common").glob("*.so")} == leaves
    assert not (venv / "bin" / "mypy").exists(), "mypyc stays in the build venv"
    assert not (site / "tests").exists() and not (site / "build").exists()

    docs = _json_docs()
    assert len(docs) >= 200
    answered = subprocess.run([str(venv / "bin" / "python"), "-c", _ANSWER], input=json.dumps(docs),
                              env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    where, *outcomes = json.loads(answered.stdout)
    assert where.startswith(str(site / "rsi_common" / "world.")) and where.endswith(".so"), where
    got = [tuple(o) for o in outcomes]
    from rsi_common.world import finalize_world

    want = [_outcome(finalize_world, doc) for doc in docs]
    assert got == want
    assert sum(o[0] == "ok" for o in want) >= 40 and sum(o[0] != "ok" for o in want) >= 100
