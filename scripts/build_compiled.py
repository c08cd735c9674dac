#!/usr/bin/env python3
"""Compile the turn checks with mypyc, in place (docs/dev/compiled.md).

    .venv/bin/python scripts/build_compiled.py          # build (the Makefile's install step)
    .venv/bin/python scripts/build_compiled.py --clean  # remove the built files: pure Python again
    python scripts/build_compiled.py --root SITE_PACKAGES  # an installed copy (deploy/install.sh)

Builds :data:`rsi_common.compiled.COMPILED_MODULES` into one shared library
``rsi_common/_checks__mypyc*.so`` and one small extension per module beside its source, which Python
imports before the ``.py`` of the same name. The C sources and objects go to ``build/mypyc``. Needs
gcc and the Python headers. mypyc type-checks only the listed modules (``--follow-imports=skip``:
what they import is an ordinary Python object to them), so the build takes seconds, not minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PURE_PYTHON_CHECKS"] = "1"  # this script imports the package, never a build it replaces

from rsi_common.compiled import COMPILED_MODULES, SHARED_LIBRARY  # noqa: E402

BUILD_DIR = "build/mypyc"


def built_files(root: Path = ROOT) -> list[Path]:
    """The extension files a build leaves beside the sources of ``root/rsi_common``."""
    leaves = [SHARED_LIBRARY, *COMPILED_MODULES]
    return sorted(p for name in leaves
                  for p in (root / "rsi_common").glob(f"{name.rpartition('.')[2]}.*.so"))


def clean(root: Path = ROOT) -> None:
    """Remove the built extensions (the package then imports its Python source)."""
    for path in built_files(root):
        path.unlink()


def build(root: Path = ROOT) -> None:
    """Compile the listed modules of ``root/rsi_common`` — the checkout, or an installed copy's
    ``site-packages`` — beside their sources (a failed build leaves no extension behind). The
    checkout builds in place (C sources and objects in ``build/mypyc``); an installed copy's
    listed sources are compiled in a scratch directory (mypy must not see the other top-level
    modules of ``site-packages``) and the extensions copied beside them."""
    if root == ROOT:
        _compile(ROOT, BUILD_DIR, [])
        return
    clean(root)
    with tempfile.TemporaryDirectory(prefix="rsi-mypyc-") as scratch:
        work = Path(scratch)
        (work / "rsi_common").mkdir()
        for leaf in ["__init__", *(name.rpartition(".")[2] for name in COMPILED_MODULES)]:
            shutil.copy2(root / "rsi_common" / f"{leaf}.py", work / "rsi_common")
        # Alone there, what they import is not found, where the checkout finds and skips it: to
        # both builds it is an ordinary Python object (Any).
        _compile(work, str(work / "build"), ["--ignore-missing-imports"])
        for path in built_files(work):
            shutil.copy2(path, root / "rsi_common" / path.name)
    for path in built_files(root):
        os.utime(path)


def _compile(root: Path, build_dir: str, flags: list[str]) -> None:
    import warnings

    from mypyc.build import mypycify
    from setuptools import setup

    warnings.filterwarnings("ignore", message=r".*\[tool.setuptools\]")  # setuptools reads pyproject.toml

    os.chdir(root)
    clean(root)
    sources = [name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    try:
        extensions = mypycify(["--follow-imports=skip", "--no-warn-return-any", *flags, *sources],
                              group_name=SHARED_LIBRARY.removesuffix("__mypyc"), target_dir=build_dir)
        setup(name="rsi-checks-compiled", ext_modules=extensions,
              script_args=["-q", "build_ext", "--inplace", "--build-temp", build_dir])
    except BaseException:
        clean(root)
        raise
    for path in built_files(root):  # setuptools keeps an unchanged object's old time: mark them built now
        os.utime(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the built files")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the directory holding rsi_common/ (default: this checkout)")
    args = parser.parse_args()
    root = args.root.resolve()
    if not (root / "rsi_common" / "compiled.py").is_file():
        parser.error(f"--root {root}: no rsi_common/compiled.py there")
    if args.clean:
        clean(root)
        return
    start = time.monotonic()
    build(root)
    print(f"compiled {len(COMPILED_MODULES)} modules in {time.monotonic() - start:.1f} s "
          f"({', '.join(p.name.split('.')[0] for p in built_files(root))})", file=sys.stderr)


if __name__ == "__main__":
    main()
