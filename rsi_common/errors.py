"""The one error tree of rsi-worker, classed by what happens next.

* :class:`InvalidInput` — bad input from a caller (a host, a CLI user, a file). It is reported to
  the caller with a readable message and nothing is stored.
* :class:`ReplayFailure` — a replay of one world under one harness failed. It is recorded against
  the candidate (a missing trial), never retried.
* :class:`InfrastructureError` — a backend (broker, Redis, database, model provider) failed in a
  way that may pass. The operation is retried by its owner (Celery, the kernel's model retries).
* :class:`CoordinationError` — the run lost its right to write (lease lost, fence superseded).
  The run stops at once and writes nothing else.

Failures are stored as data (:func:`rsi_common.stored.error_record`), never pickled.
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "AgentConflict",
    "BrokerUnavailable",
    "CoordinationError",
    "CredentialError",
    "FenceRejected",
    "InfrastructureError",
    "InputLimitError",
    "InvalidInput",
    "LeaseLost",
    "LockedFieldError",
    "ManifestError",
    "ManifestLimitError",
    "ModelAuthError",
    "ModelBadRequest",
    "ModelError",
    "ModelOutputError",
    "ModelTransientError",
    "PathEscapeError",
    "ReplayFailure",
    "RsiError",
    "ServiceUnavailable",
    "SettingsError",
    "TamperError",
    "TurnNotStored",
    "UnknownAgentError",
    "UnknownVersionError",
    "WorldError",
    "WorldLimitError",
]


class RsiError(Exception):
    """Base of every error raised on purpose by rsi-worker."""


# --- reported to the caller -------------------------------------------------------------------


class InvalidInput(RsiError, ValueError):
    """Input that can never succeed as given; the message says what to fix."""


class SettingsError(InvalidInput):
    """A setting is unknown, misspelt or out of range."""


class ManifestError(InvalidInput):
    """A harness manifest breaks a rule of docs/formats.md §5.1."""


class PathEscapeError(ManifestError):
    """A harness file path is absolute, empty or leaves the harness root."""


class TamperError(InvalidInput):
    """A harness payload's claimed version differs from the version of its content."""


class LockedFieldError(InvalidInput):
    """An edit touches a locked address or a platform field (docs/architecture.md invariant 8)."""


class WorldError(InvalidInput):
    """A world record is malformed; the message names the offending field."""


class CredentialError(WorldError):
    """A record contains something that looks like a credential and was refused."""


class InputLimitError(InvalidInput):
    """A value breaks a rule of the input boundary (:mod:`rsi_common.boundary`): a size or nesting
    limit, the id grammar, a number range or a character rule. The message starts with the field
    path and names the limit; it never contains the value (docs/security/input-boundary.md)."""


class WorldLimitError(InputLimitError, WorldError):
    """An input-boundary refusal inside a world record (caught wherever a bad world is)."""


class ManifestLimitError(InputLimitError, ManifestError):
    """An input-boundary refusal inside a harness manifest or payload (caught wherever a bad manifest is)."""


class UnknownAgentError(InvalidInput, KeyError):
    """No agent with this id exists."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return str(self.args[0]) if self.args else "unknown agent"


class AccessDenied(InvalidInput):
    """The service refused the caller's token (401: missing, unknown or revoked; 403: a scope is
    missing or the agent is outside the token's prefix). Never retried."""


class AgentConflict(InvalidInput):
    """The agent's state refuses the operation now (the service's 409): ``slug`` is ``agent-busy``
    (a run holds its lease) or ``agent-frozen`` (an operator froze it)."""

    def __init__(self, slug: str, message: str) -> None:
        super().__init__(message)
        self.slug = slug


class UnknownVersionError(InvalidInput, KeyError):
    """No stored harness version with this id exists for the agent."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown version"


# --- recorded against a candidate -------------------------------------------------------------


class ReplayFailure(RsiError):
    """A replay could not produce a trial (the trial is recorded as missing)."""


# --- retried ----------------------------------------------------------------------------------


class InfrastructureError(RsiError):
    """A backend failed in a way that may pass; the owner retries."""


class BrokerUnavailable(InfrastructureError):
    """The task broker could not be reached (or refused the message) within the dispatcher's timeout.

    A host never sees it from ``RsiClient.record_turn``: the world stays stored and un-enqueued, and
    the sweeper hands it off later.
    """


class ServiceUnavailable(InfrastructureError):
    """The rsi-worker service could not be reached, or kept answering 429 / 5xx, after the client's
    retries (``rsi_common.http_client``)."""


class TurnNotStored(InfrastructureError):
    """A host's turn could not be stored: the database kept failing with a transient error for the
    whole retry budget (``rsi_common.record_retry``). Nothing of the turn is stored; recording it
    again later is safe (idempotent by io id). The message names the agent, the io id and the error
    class, never a value of the turn; the database error is the ``__cause__``."""

    def __init__(self, agent_id: str, io_id: str, error: str, attempts: int, seconds: float) -> None:
        super().__init__(f"turn {io_id!r} of agent {agent_id!r} was not stored: database error {error} "
                         f"after {attempts} attempt(s) in {seconds:.1f} s")
        self.agent_id, self.io_id, self.error, self.attempts = agent_id, io_id, error, attempts


class ModelError(RsiError):
    """A model provider call failed."""


class ModelTransientError(ModelError, InfrastructureError):
    """Rate limit, timeout, connection error or 5xx; retried with backoff."""


class ModelAuthError(ModelError):
    """The provider refused the credentials (401/403); never retried."""


class ModelBadRequest(ModelError):
    """The provider refused the request itself (400/404/422); never retried."""


class ModelOutputError(ModelError):
    """The model answered, but not in the required form (e.g. no JSON object after every attempt)."""


# --- the run must stop ------------------------------------------------------------------------


class CoordinationError(RsiError):
    """The run lost its right to write."""


class LeaseLost(CoordinationError):
    """The per-agent lease expired or is held by another run."""


class FenceRejected(CoordinationError):
    """A newer run has written for this agent; this run's write is refused."""
