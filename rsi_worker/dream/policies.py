"""Exploration policies: the ``plan_grid`` / ``choose`` interface, the builtins, and policies as
harness entries (docs/dream/policies.md).

A policy is Python source defining ``plan_grid(ctx)`` (→ ``{branch_count, refine_count}``) and
``choose(view, beta)`` (→ a list of cell ids, ``[]`` = stop); β is fixed within an episode; there is
no randomness and no clock (neither module is importable). :class:`PolicyCode` is that source with
a name; ``session()`` gives one episode's :class:`~rsi_worker.dream.replay.PolicySession`: in this
process for the trusted builtins, in the sandbox for anything else.

In a harness the policy is the manifest's ``exploration_policy`` = ``{file, default_beta, W, name,
cycle_id}`` with the source as the referenced file, so it is versioned with the harness.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_common.harness.payload import Harness, build_harness
from rsi_common.math.dream import DEFAULT_BETA, GridPlan, GridPlanningContext
from rsi_worker.dream.replay import PolicyFailure, PolicySession
from rsi_worker.dream.sandbox import SandboxLimits, SandboxSession, load_namespace, plan_from
from rsi_worker.dream.view import PolicyView

__all__ = [
    "BUILTINS",
    "POLICY_FILE",
    "PolicyCode",
    "builtin",
    "harness_policy",
    "incumbent_policy",
    "with_policy",
]

POLICY_FILE = "dream/exploration_policy.py"
BUILTINS = ("fixed_width", "parallel_refine")
INCUMBENT = "fixed_width"
"""π⁰ of an agent whose harness has no ``exploration_policy``."""


@dataclass(frozen=True)
class PolicyCode:
    """Policy source plus its baked defaults. ``trusted`` runs in this process (builtins only)."""

    name: str
    source: str
    default_beta: float = DEFAULT_BETA
    W: int = 4
    trusted: bool = False

    @property
    def digest(self) -> str:
        """SHA-256 of the source (first 16 hex digits)."""
        return hashlib.sha256(self.source.encode("utf-8", "surrogatepass")).hexdigest()[:16]

    @contextmanager
    def session(self, limits: SandboxLimits | None = None) -> Iterator[PolicySession]:
        """One episode's policy (a fresh namespace or a fresh child each time)."""
        if self.trusted:
            yield _InProcess(load_namespace(self.source))
            return
        s = SandboxSession(self.source, limits)
        try:
            s.__enter__()
            yield s
        finally:
            s.close()

    def with_beta(self, beta: float) -> PolicyCode:
        """The same code with another baked default β."""
        return PolicyCode(self.name, self.source, beta, self.W, self.trusted)

    def to_json(self) -> dict[str, Any]:
        """``{name, source, default_beta, W}`` (``trusted`` is never read back from data)."""
        return {"name": self.name, "source": self.source, "default_beta": self.default_beta, "W": self.W}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PolicyCode:
        """Inverse of :meth:`to_json`: always untrusted, unless it is a builtin's exact source."""
        code = cls(str(d["name"]), str(d["source"]), float(d["default_beta"]), int(d["W"]))
        return _trust_builtin(code)


class _InProcess:
    def __init__(self, ns: dict[str, Any]) -> None:
        self._plan, self._choose = ns["plan_grid"], ns["choose"]

    def plan_grid(self, ctx: GridPlanningContext) -> GridPlan:
        return plan_from(self._plan(ctx))

    def choose(self, view: PolicyView, beta: float) -> list[str]:
        batch = self._choose(view, beta)
        if not isinstance(batch, list):
            raise PolicyFailure(f"choose returned {type(batch).__name__}, not a list of cell ids")
        return batch


def _builtin_source(name: str) -> str:
    return (
        resources.files("rsi_worker.dream").joinpath("builtin").joinpath(f"{name}.policy").read_text("utf-8")
    )


def builtin(name: str, *, beta: float = DEFAULT_BETA, W: int = 4) -> PolicyCode:
    """A builtin policy (trusted).

    Raises:
        InvalidInput: unknown name (the message lists the builtins).
    """
    if name not in BUILTINS:
        raise InvalidInput(f"unknown builtin policy {name[:40]!r}; expected one of {', '.join(BUILTINS)}")
    return PolicyCode(name, _builtin_source(name), beta, W, trusted=True)


def _trust_builtin(code: PolicyCode) -> PolicyCode:
    for name in BUILTINS:
        if code.source == _builtin_source(name):
            return PolicyCode(code.name, code.source, code.default_beta, code.W, trusted=True)
    return code


def incumbent_policy() -> PolicyCode:
    """π⁰ of a harness without ``exploration_policy``."""
    return builtin(INCUMBENT)


def harness_policy(h: Harness) -> PolicyCode:
    """The harness's exploration policy, or :func:`incumbent_policy` when it has none."""
    entry = h.manifest.exploration_policy
    if entry is None:
        return incumbent_policy()
    source = h.files[str(entry["file"])]
    beta = float(entry.get("default_beta", DEFAULT_BETA))
    return _trust_builtin(PolicyCode(str(entry.get("name", "policy")), source, beta, int(entry.get("W", 4))))


def with_policy(h: Harness, code: PolicyCode, *, cycle_id: str) -> Harness:
    """A new harness version: ``h`` with ``exploration_policy`` pointing at ``code`` (parent = ``h``)."""
    manifest = h.manifest.to_json()
    manifest["parent"] = h.version
    manifest["exploration_policy"] = {
        "file": POLICY_FILE,
        "default_beta": code.default_beta,
        "W": code.W,
        "name": code.name,
        "cycle_id": cycle_id,
    }
    files = dict(h.files)
    files[POLICY_FILE] = code.source
    return build_harness(manifest, files)
