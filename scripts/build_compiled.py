#!/usr/bin/env python3
"""Compile the turn checks with mypyc, in place (docs/dev/compiled.md).

    .venv/bin/python scripts/build_compiled.py          # build (the Makefile's install step)
    .venv/bin/python scripts/build_compiled.py --clean  # remove the built files: pure Python again

Builds :data:`rsi_common.compiled.COMPILED_MODULES` into one shared library
``rsi_common/_checks__mypyc*.so`` and one small extension per module beside its source, which Python
imports before the ``.py`` of the same name. The C sources and objects go to ``build/mypyc``. Needs
gcc and the Python headers. mypyc type-checks only the listed modules (``--follow-imports=skip``:
what they import is an ordinary Python object to them), so the build takes seconds, not minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PURE_PYTHON_CHECKS"] = "1"  # this script imports the package, never a build it replaces

from rsi_common.compiled import COMPILED_MODULES, SHARED_LIBRARY  # noqa: E402

BUILD_DIR = "build/mypyc"


def built_files() -> list[Path]:
    """The extension files a build leaves in the source tree."""
    leaves = [SHARED_LIBRARY, *COMPILED_MODULES]
    return sorted(p for name in leaves
                  for p in (ROOT / "rsi_common").glob(f"{name.rpartition('.')[2]}.*.so"))


def clean() -> None:
    """Remove the built extensions (the package then imports its Python source)."""
    for path in built_files():
        path.unlink()


def build() -> None:
    """Compile the listed modules in place (a failed build leaves no extension behind)."""
    import warnings

    from mypyc.build import mypycify
    from setuptools import setup

    warnings.filterwarnings("ignore", message=r".*\[tool.setuptools\]")  # setuptools reads pyproject.toml

    os.chdir(ROOT)
    clean()
    sources = [name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    try:
        extensions = mypycify(["--follow-imports=skip", "--no-warn-return-any", *sources],
                              group_name=SHARED_LIBRARY.removesuffix("__mypyc"), target_dir=BUILD_DIR)
        setup(name="rsi-checks-compiled", ext_modules=extensions,
              script_args=["-q", "build_ext", "--inplace", "--build-temp", BUILD_DIR])
    except BaseException:
        clean()
        raise
    for path in built_files():  # setuptools keeps an unchanged object's old time: mark them built now
        os.utime(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the built files")
    args = parser.parse_args()
    if args.clean:
        clean()
        return
    start = time.monotonic()
    build()
    print(f"compiled {len(COMPILED_MODULES)} modules in {time.monotonic() - start:.1f} s "
          f"({', '.join(p.name.split('.')[0] for p in built_files())})", file=sys.stderr)


if __name__ == "__main__":
    main()
