"""The component base class: param reads that are recorded (docs/formats.md §5.6 *Param reads*).

A component is created per turn as ``cls(spec, files)`` (``files`` = the harness files it lists).
``param(key, default)`` returns ``params[key]`` — a dotted key walks nested objects — or the
default, and records the key in both cases; ``params_read()`` yields ``<id>.params.<key>``.
When no default is given, the class's ``PARAMS`` catalog default (the H0 value) is used.

The typed readers (``param_bool`` …) fall back to the catalog default when a harness stores a
value of the wrong type, so a malformed candidate degrades to H0 behaviour instead of crashing a
turn (project decision); the read is recorded either way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rsi_common.harness import ComponentSpec
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.kernel.types import ToolDef

__all__ = ["Component"]

_MISSING: Any = object()


class Component:
    """Base of every registered component implementation.

    Class attributes:
        KIND: the component kind (∈ 𝒦) the class implements.
        PARAMS: ``key -> (default, one-line doc)``, the proposer's catalog (docs/formats.md §6.1).

    Optional hooks every kind may implement: ``tools(rt) -> list[ToolDef]`` (harness-contributed
    tools, registered as core) and ``prompt_blocks(rt) -> list[tuple[str, str]]`` (parts appended
    by the prompt component after its extra blocks).
    """

    KIND: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {}

    def __init__(self, spec: ComponentSpec, files: Mapping[str, str]) -> None:
        self.spec = spec
        self.files: dict[str, str] = dict(files)
        self._keys_read: set[str] = set()

    @property
    def id(self) -> str:
        """The component id from the manifest."""
        return self.spec.id

    def param(self, key: str, default: Any = _MISSING) -> Any:
        """``params[key]`` (dotted keys walk nested objects) or the default; records the read."""
        self._keys_read.add(key)
        if default is _MISSING:
            default = self.PARAMS[key][0] if key in self.PARAMS else None
        node: Any = self.spec.params
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def params_read(self) -> set[str]:
        """Addresses ``<id>.params.<key>`` of every param read so far."""
        return {f"{self.id}.params.{k}" for k in self._keys_read}

    # --- typed readers (fallback to the catalog default on a wrong type) --------------------

    def _default(self, key: str) -> Any:
        return self.PARAMS[key][0] if key in self.PARAMS else None

    def param_bool(self, key: str) -> bool:
        """A boolean param."""
        v = self.param(key)
        return v if isinstance(v, bool) else bool(self._default(key))

    def param_int(self, key: str) -> int:
        """An integer param (integral floats accepted)."""
        v = self.param(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v != int(v):
            return int(self._default(key))
        return int(v)

    def param_float(self, key: str) -> float:
        """A finite number param."""
        v = self.param(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return float(self._default(key))
        return float(v)

    def param_str(self, key: str) -> str:
        """A string param."""
        v = self.param(key)
        return v if isinstance(v, str) else str(self._default(key))

    def param_list(self, key: str) -> list[Any]:
        """A list param."""
        v = self.param(key)
        return list(v) if isinstance(v, list) else list(self._default(key) or [])

    def param_dict(self, key: str) -> dict[str, Any]:
        """An object param."""
        v = self.param(key)
        return dict(v) if isinstance(v, Mapping) else dict(self._default(key) or {})

    # --- optional hooks ------------------------------------------------------------------------

    def tools(self, rt: TurnRuntime) -> list[ToolDef]:
        """Harness-contributed tools (none by default)."""
        return []

    def prompt_blocks(self, rt: TurnRuntime) -> list[tuple[str, str]]:
        """Prompt parts this component contributes (none by default)."""
        return []
