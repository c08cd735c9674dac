"""The turn checks' Python source loaded as a second, pure copy under the package ``_pure_checks``
(docs/dev/compiled.md): each module of :data:`rsi_common.compiled.COMPILED_MODULES` is executed from
its ``.py`` with its imports of the other listed modules pointed at the copy, so the copy never calls
compiled code. What they import from the rest of ``rsi_common`` (the error classes, the schema) is
shared, so exception types compare equal."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType

from rsi_common.compiled import COMPILED_MODULES

PACKAGE = "_pure_checks"
_ROOT = Path(__file__).resolve().parents[3]
_LEAVES = "|".join(name.rpartition(".")[2] for name in COMPILED_MODULES)
_IMPORT = re.compile(rf"\brsi_common\.({_LEAVES})\b")


def load(*extra: str) -> dict[str, ModuleType]:
    """``{"rsi_common.world": <its pure copy>, …}`` (loaded once per process), and a copy of each
    ``extra`` module (e.g. ``rsi_common.host_input``) calling the pure copies."""
    package = sys.modules.get(PACKAGE)
    if package is None:
        package = ModuleType(PACKAGE)
        package.__path__ = []
        sys.modules[PACKAGE] = package
    names = (*COMPILED_MODULES, *extra)
    for name in names:  # listed in import order: the copies a module imports exist before it
        leaf = name.rpartition(".")[2]
        if f"{PACKAGE}.{leaf}" not in sys.modules:
            path = _ROOT / f"{name.replace('.', '/')}.py"
            module = ModuleType(f"{PACKAGE}.{leaf}")
            module.__file__ = str(path)
            sys.modules[module.__name__] = module
            code = _IMPORT.sub(rf"{PACKAGE}.\1", path.read_text(encoding="utf-8"))
            exec(compile(code, str(path), "exec"), module.__dict__)
            setattr(package, leaf, module)
    return {name: sys.modules[f"{PACKAGE}.{name.rpartition('.')[2]}"] for name in names}
