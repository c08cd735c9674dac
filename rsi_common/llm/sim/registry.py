"""The sim's role-behaviour registry: which function answers a call made in a role.

The sim answers a role the way the role's prompt layout asks, so a behaviour belongs with the
layout it reads. The registry is how the two meet without this package importing its readers:

* built in: ``policy`` (the agent's own turn, :mod:`~rsi_common.llm.sim.policy`) and ``judge``,
  ``signal`` and ``compact`` (:mod:`~rsi_common.llm.sim.roles`);
* ``analyst``, ``proposer`` and ``critic`` are registered by ``rsi_worker.roles`` when it is
  imported: it writes those prompts, and its behaviours read the same section constants its prompt
  builders write, so a header cannot change on one side only.

A call in a role without a behaviour is refused with :class:`~rsi_common.errors.ModelBadRequest`
that names the role (:func:`behaviour`).
"""

from __future__ import annotations

from collections.abc import Mapping

from rsi_common.errors import InvalidInput, ModelBadRequest
from rsi_common.llm.sim.core import SimHandler
from rsi_common.llm.sim.policy import policy
from rsi_common.llm.sim.roles import compact, judge, signal

__all__ = ["SIM_ROLES", "behaviour", "register_sim_role"]

SIM_ROLES: dict[str, SimHandler] = {"policy": policy, "judge": judge, "signal": signal, "compact": compact}
"""Role → behaviour. Extend only through :func:`register_sim_role`."""


def register_sim_role(role: str, handler: SimHandler, *, replace: bool = False) -> None:
    """Add the sim behaviour of ``role`` (e.g. ``analyst`` from ``rsi_worker.roles``).

    Registering the same handler again is a no-op, so module imports may repeat.

    Raises:
        InvalidInput: ``role`` already has another behaviour and ``replace`` is false.
    """
    current = SIM_ROLES.get(role)
    if current is not None and current is not handler and not replace:
        raise InvalidInput(f"the sim role {role!r} already has a behaviour; pass replace=True to swap it")
    SIM_ROLES[role] = handler


def behaviour(role: str, handlers: Mapping[str, SimHandler] | None = None) -> SimHandler:
    """The behaviour of ``role`` in ``handlers`` (default :data:`SIM_ROLES`).

    Raises:
        ModelBadRequest: no behaviour is registered for ``role``.
    """
    handler = (SIM_ROLES if handlers is None else handlers).get(role)
    if handler is None:
        raise ModelBadRequest(
            f"sim: no behaviour is registered for the role {role!r}; the code that lays out the role's "
            "prompt registers one with rsi_common.llm.sim.register_sim_role (importing rsi_worker.roles "
            "registers analyst, proposer and critic)"
        )
    return handler
