"""The turn checks compiled with mypyc, and the switch back to their Python source
(docs/dev/compiled.md).

``make`` compiles :data:`COMPILED_MODULES` in place (``scripts/build_compiled.py``): one shared
library ``rsi_common/_checks__mypyc*.so`` and, beside each source, an extension Python imports
before the ``.py`` of the same name. The source stays the definition; the build is optional and
gives the same results (a differential test compares the two).

:func:`use_source` (run by the package's ``__init__``) imports every listed module from its ``.py``
instead when ``PURE_PYTHON_CHECKS=1``, when no build is present, or when any listed source is newer
than the build (an edited checkout must never run stale compiled code): all of them or none, since
compiled modules call each other natively.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["COMPILED_MODULES", "PURE_ENV", "SHARED_LIBRARY", "build_is_current", "is_compiled",
           "use_source", "using_source"]

COMPILED_MODULES: tuple[str, ...] = (
    "rsi_common.boundary",
    "rsi_common.credential_table",
    "rsi_common.credentials",
    "rsi_common.world_boundary",
    "rsi_common.world",
)
"""The modules the build compiles (the turn checks, docs/performance/turn-checks.md), each after the
listed modules it imports; one per line, as the Makefile reads them."""
SHARED_LIBRARY = "rsi_common._checks__mypyc"
"""The module name of the build's shared library (mypyc's group ``rsi_common._checks``)."""
PURE_ENV = "PURE_PYTHON_CHECKS"
"""Set to ``1`` to import the Python source of every compiled module (not an ``RSI_*`` variable:
the settings refuse unknown ones)."""

_PACKAGE = Path(__file__).resolve().parent


def _built(leaf: str) -> list[Path]:
    return [p for suffix in EXTENSION_SUFFIXES if (p := _PACKAGE / f"{leaf}{suffix}").is_file()]


def build_is_current() -> bool:
    """Whether a complete build is present and no listed source is newer than it."""
    libraries = _built(SHARED_LIBRARY.rpartition(".")[2])
    if not libraries:
        return False
    built_at = min(p.stat().st_mtime for p in libraries)
    for name in COMPILED_MODULES:
        leaf = name.rpartition(".")[2]
        extensions = _built(leaf)
        if not extensions or (_PACKAGE / f"{leaf}.py").stat().st_mtime > built_at:
            return False
    return True


class _SourceFinder:
    """A meta path finder that loads the listed modules from their ``.py`` files."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        return spec_from_file_location(fullname, _PACKAGE / f"{fullname.rpartition('.')[2]}.py")


def use_source() -> bool:
    """Install the source finder unless a current build is to be used (module docstring); returns
    whether the Python source is used. Idempotent."""
    if os.environ.get(PURE_ENV) != "1" and build_is_current():
        return False
    if not using_source():
        sys.meta_path.insert(0, _SourceFinder())
    return True


def using_source() -> bool:
    """Whether this process imports the listed modules from their source (:func:`use_source` chose
    so when the package was imported)."""
    return any(isinstance(f, _SourceFinder) for f in sys.meta_path)


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension (not from its ``.py``)."""
    spec = module.__spec__
    origin = spec.origin if spec is not None else None
    return origin is not None and origin.endswith(tuple(EXTENSION_SUFFIXES))
