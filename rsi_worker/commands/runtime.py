"""``rsi runtime <method>``: one subcommand per :class:`~rsi_common.runtime.host.RuntimeClient` method
(docs/runtime/cli.md).

The commands are built from :data:`METHODS`, one row per method: its name (the subcommand is the
method's name, D40), its arguments (positional, or ``--options``; each passed to the method by
keyword) and how its result is printed. Adding a method to the CLI is adding one row.

Every value arrives as text and is parsed here, so a hostile value gets one line naming the field and
exit code 2 (D41), never a traceback and never the value itself (a pasted secret is not echoed).
The runtime's own refusals of well-formed input are exit code 2 as well; an agent or handle that does
not exist is exit code 1, as for the other ``rsi`` commands (D41). Every command takes ``--json``.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rsi_worker.commands.common import EXIT_INPUT, EXIT_SETUP, cli_errors, echo_json, fail, load_settings

if TYPE_CHECKING:
    from rsi_common.runtime.host import RuntimeClient

__all__ = ["METHODS", "Arg", "Method", "parse_arg", "runtime"]

runtime = typer.Typer(no_args_is_help=True, help="The agent runtime: agents, sub-agents, messages, spend.")

MAX_JSON_BYTES = 1_048_576
"""Largest JSON argument (or ``@file``) accepted, in bytes."""
MAX_TEXT_CHARS = 65_536
"""Largest text argument accepted (the runtime's own limits are smaller: 16,384 for a message)."""


@dataclass(frozen=True)
class Arg:
    """One argument of a method.

    Attributes:
        name: the method's keyword (the option is ``--name`` with ``_`` → ``-``).
        kind: ``id`` (the id grammar), ``text``, ``json`` (JSON text or ``@file``; ``null`` allowed),
            ``int``, ``float``, ``bool`` (``true`` or ``false``), ``list`` (positional, one or more), or
            ``choice`` (one of ``choices``).
        help: the help line.
        option: an ``--option`` (omitted: the method's default applies) instead of a positional argument.
        choices: the values of a ``choice``.
    """

    name: str
    kind: str
    help: str
    option: bool = False
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Method:
    """One row of the CLI: a RuntimeClient method, its arguments and its text renderer."""

    name: str
    help: str
    args: tuple[Arg, ...]
    render: Callable[[Any], str]


def parse_arg(arg: Arg, raw: Any) -> Any:
    """The value of ``arg`` from its command-line text.

    Raises:
        InvalidInput: a value that does not parse (the message names the field, never the value).
    """
    from rsi_common.boundary import parse_json
    from rsi_common.errors import InvalidInput

    if arg.kind == "list":
        return [parse_arg(Arg(arg.name, "text", arg.help), v) for v in raw]
    if not isinstance(raw, str):
        raise InvalidInput(f"{arg.name}: must be text")
    if arg.kind == "id":
        from rsi_common.boundary import check_id

        return check_id(raw, arg.name)
    if arg.kind == "text":
        if len(raw) > MAX_TEXT_CHARS:
            raise InvalidInput(f"{arg.name}: at most {MAX_TEXT_CHARS:,} characters")
        return raw
    if arg.kind == "json":
        text: str | bytes = raw
        if raw.startswith("@"):
            path = Path(raw[1:])
            try:
                if path.stat().st_size > MAX_JSON_BYTES:
                    raise InvalidInput(f"{arg.name}: the file is over {MAX_JSON_BYTES:,} bytes")
                text = path.read_bytes()
            except OSError as exc:
                raise InvalidInput(f"{arg.name}: cannot read the file ({exc.strerror or type(exc).__name__})"
                                   ) from None
        return parse_json(text, arg.name, max_bytes=MAX_JSON_BYTES)
    if arg.kind in ("int", "float"):
        try:
            value: float = int(raw) if arg.kind == "int" else float(raw)
        except ValueError:
            raise InvalidInput(f"{arg.name}: must be {'an integer' if arg.kind == 'int' else 'a number'}"
                               ) from None
        if not math.isfinite(value):
            raise InvalidInput(f"{arg.name}: must be a finite number")
        return value
    if arg.kind == "bool":
        if raw not in ("true", "false"):
            raise InvalidInput(f"{arg.name}: must be true or false")
        return raw == "true"
    if arg.kind == "choice":
        if raw not in arg.choices:
            raise InvalidInput(f"{arg.name}: must be one of {', '.join(arg.choices)}")
        return raw
    raise AssertionError(f"unknown kind {arg.kind}")


# --- renderers -----------------------------------------------------------------------------------


def show_value(out: Any) -> str:
    """A scalar, a list (one line each) or a mapping (``key: value`` lines)."""
    if isinstance(out, dict):
        return "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else v}"
                         for k, v in out.items())
    if isinstance(out, list):
        return "\n".join(show_value(v) if not isinstance(v, dict) else json.dumps(v, ensure_ascii=False)
                         for v in out) or "(none)"
    return str(out)


def show_tree(out: dict[str, Any]) -> str:
    """The tree, indented by depth: each agent with its lifecycle, each handle with its status."""
    lines = [f"tree {out['root']} on {out['day']}"]

    def walk(node: dict[str, Any], indent: str) -> Iterator[str]:
        spec = f" ({node['spec']})" if node.get("spec") else ""
        yield f"{indent}{node['agent']}{spec} [{node['lifecycle']}] depth {node['depth']}"
        for h in node["handles"]:
            why = f" {h['error']}" if h.get("error") else ""
            yield f"{indent}  - {h['handle']} {h['name']} {h['status']}{why}"
        for c in node["children"]:
            yield from walk(c, indent + "    ")

    lines += list(walk(out["tree"], "  "))
    spent = out["spend"]
    lines.append("spend today: " + ", ".join(f"{k} {spent[k]}" for k in
                                             ("tokens", "usd", "turns", "spawns", "messages") if k in spent))
    return "\n".join(lines)


def show_spend(out: dict[str, Any]) -> str:
    """A tree's spend against its caps, one dimension a line; or one agent's tokens."""
    if out["scope"] != "tree":
        return f"agent {out['agent']} on {out['day']}: {out['tokens']} tokens"
    lines = [f"tree {out['root']} on {out['day']}", f"{'dimension':<14}{'spent':>16}{'cap':>16}"]
    for dim, cap in out["caps"].items():
        spent = out["spent"].get(dim, "")
        lines.append(f"{dim:<14}{spent!s:>16}{'none' if cap is None else cap!s:>16}")
    return "\n".join(lines)


def show_inbox(out: list[dict[str, Any]]) -> str:
    """One line per unconsumed message: id, kind, sender and relationship, first 80 characters."""
    return "\n".join(f"{m['id']} {m['kind']} from {m['sender'] or '-'} ({m['relationship']}): "
                     f"{' '.join(m['text'].split())[:80]}" for m in out) or "(empty)"


def show_wait(out: dict[str, Any]) -> str:
    """Settled handles with their answers, then the pending ones."""
    lines = [f"{r['handle']} {r['name']} {r['status']}: {r['answer'] or r['error'] or ''}"[:200]
             for r in out["results"]]
    lines += [f"{h} pending" for h in out["pending"]]
    if out.get("timed_out"):
        lines.append("(timed out)")
    return "\n".join(lines)


# --- the table -----------------------------------------------------------------------------------

AGENT = Arg("agent", "id", "The agent id.")
SESSION = Arg("session", "text", "The session (default main).", option=True)
HANDLE = Arg("handle", "id", "The handle id (sa_…).")
JSON_HELP = "JSON text, or @FILE."

METHODS: tuple[Method, ...] = (
    Method("register", "Register (or update) a root agent.", (
        AGENT, Arg("profile", "json", f"The profile {{runs_on, model, tools, subagents, …}}: {JSON_HELP}"),
        Arg("caps", "json", f"Daily caps of the tree {{tree_tokens_per_day, …}}: {JSON_HELP}", option=True),
    ), show_value),
    Method("start_turn", "Post TEXT to the agent's session and wake its turn.",
           (AGENT, Arg("text", "text", "The message."), SESSION), show_value),
    Method("send", "An operator's message to <agent> or <agent>@<session>.",
           (Arg("to", "text", "<agent> or <agent>@<session>."), Arg("text", "text", "The message.")),
           show_value),
    Method("inbox", "The unconsumed messages of a mailbox, oldest first.", (AGENT, SESSION), show_inbox),
    Method("tree", "The agent, its descendants, their handles and the tree's spend today.", (AGENT,),
           show_tree),
    Method("lifecycle", "The agent's lifecycle state.", (AGENT,), show_value),
    Method("restore", "Return a failed agent to idle.", (AGENT,), show_value),
    Method("delete", "Tombstone the agent and its descendants; cancel their live handles.", (AGENT,),
           show_value),
    Method("spawn", "Spawn a child of PARENT from the root's catalog spec SPEC.", (
        Arg("parent", "id", "The parent agent."), Arg("spec", "text", "The catalog spec."),
        Arg("input", "text", "The child's input."), Arg("name", "text", "The handle's name.", option=True),
        SESSION, Arg("request_id", "text", "Retry key: the same id returns the same handle.", option=True),
    ), show_value),
    Method("poll", "A handle's item {handle, name, spec, status, answer, error}.", (HANDLE,), show_value),
    Method("wait", "Wait until the handles settle (or the timeout); holds no slot.", (
        Arg("handles", "list", "The handles."),
        Arg("timeout_s", "float", "Seconds (at most RSI_RUNTIME__WAIT_CAP_S).", option=True),
        Arg("mode", "choice", "all or any.", option=True, choices=("all", "any")),
    ), show_wait),
    Method("cancel", "Cancel a handle and everything below it.",
           (HANDLE, Arg("reason", "text", "Why (≤ 100 characters kept).", option=True)), show_value),
    Method("set_subagent_spec", "Add or replace (null: remove) a spec of the root's catalog.", (
        Arg("root", "id", "The root agent."), Arg("name", "text", "The spec name."),
        Arg("spec", "json", f"{{description, tools, max_iterations, instructions}} or null: {JSON_HELP}"),
    ), show_value),
    Method("spend", "The day's spend of a tree (its root) against its caps, or of one agent.", (
        Arg("scope", "id", "A root (the tree) or another agent."),
        Arg("day", "text", "YYYY-MM-DD (default: today, UTC).", option=True),
    ), show_spend),
    Method("set_caps", "Override the daily caps of a root's tree (null: clear).",
           (Arg("root", "id", "The root agent."), Arg("caps", "json", f"The caps or null: {JSON_HELP}")),
           show_value),
    Method("set_goal", "Set the agent's goal (at most one active or paused goal).", (
        AGENT, Arg("objective", "text", "What the agent works toward."),
        Arg("token_budget", "int", "Tokens the goal may use."),
        Arg("check", "text", "A check of RSI_CHECK_FACTORY that decides completion.", option=True),
    ), show_value),
    Method("update_goal", "Pause, resume or cancel the live goal, or change it.", (
        AGENT, Arg("status", "choice", "paused, active or cancelled.", option=True,
                   choices=("paused", "active", "cancelled")),
        Arg("objective", "text", "A new objective.", option=True),
        Arg("token_budget", "int", "A new token budget.", option=True),
    ), show_value),
    Method("goal", "The agent's live goal, else its latest one.", (AGENT,), show_value),
    Method("add_heartbeat", "A heartbeat posting [heartbeat LABEL] INSTRUCTION on a schedule.", (
        AGENT, Arg("instruction", "text", "The heartbeat's message."),
        Arg("every_s", "int", "Every N seconds (≥ 60).", option=True),
        Arg("cron", "text", "A 5-field UTC cron expression.", option=True),
        Arg("label", "text", "The label (default heartbeat).", option=True), SESSION,
    ), show_value),
    Method("update_heartbeat", "Pause, resume, delete or change a heartbeat.", (
        Arg("heartbeat", "id", "The heartbeat id."),
        Arg("status", "choice", "paused, active or deleted.", option=True,
            choices=("paused", "active", "deleted")),
        Arg("instruction", "text", "A new instruction.", option=True),
        Arg("every_s", "int", "Every N seconds (≥ 60).", option=True),
        Arg("cron", "text", "A 5-field UTC cron expression.", option=True),
        Arg("label", "text", "A new label.", option=True),
    ), show_value),
    Method("start_autonomy", "Start the agent's autonomous loop and wake its first turn.", (
        AGENT,
        Arg("budget", "json", f"{{max_turns, max_tokens, max_usd, max_wall_s}}: {JSON_HELP}", option=True),
        Arg("check", "text", "A check of RSI_CHECK_FACTORY.", option=True), SESSION,
    ), show_value),
    Method("stop_autonomy", "Stop the agent's loop (stopped/operator).", (AGENT,), show_value),
    Method("autonomy", "The agent's running loop, else the last one.", (AGENT,), show_value),
    Method("refine", "Request a refine run: FOCUS steers, criteria become checks.", (
        AGENT, Arg("focus", "text", "A direction for the analyst and proposer.", option=True),
        Arg("criteria", "json", f"At most 5 criteria of at most 500 characters, a JSON list: {JSON_HELP}",
            option=True),
        Arg("requested_by", "text", "Who asks (default operator).", option=True),
    ), show_value),
    Method("refine_request", "The agent's own refine request (profile refine, cooldown, no criteria).",
           (AGENT, Arg("focus", "text", "A direction.")), show_value),
    Method("taint", "Taint the world of the agent's turn IO: it never enters a round again.",
           (AGENT, Arg("io", "text", "The turn's io."), Arg("reason", "text", "Why.")), show_value),
    Method("revoke", "Revoke a harness version (rolls back if current).", (
        AGENT, Arg("version", "text", "The version."), Arg("reason", "text", "Why."),
        Arg("taint_evidence", "bool", "Also taint the adopting run's worlds (true or false).", option=True),
    ), show_value),
    Method("audit", "Per version: origin, requester, focus, run, S★, δ, ΔS, ΔC, diff, revocation.",
           (AGENT,), show_value),
)


# --- building the commands -------------------------------------------------------------------------


@contextmanager
def _client() -> Iterator[RuntimeClient]:
    from rsi_common.runtime.host import RuntimeClient
    from rsi_worker.commands.common import open_client

    client = open_client(load_settings())
    try:
        yield RuntimeClient(client, actor="operator:cli")
    finally:
        client.close()


def _run(method: Method, values: dict[str, Any], as_json: bool) -> None:
    from rsi_common.errors import InvalidInput, UnknownAgentError

    kwargs: dict[str, Any] = {}
    for arg in method.args:
        raw = values.get(arg.name)
        if raw is None:
            continue
        try:
            kwargs[arg.name] = parse_arg(arg, raw)
        except InvalidInput as exc:
            fail(str(exc), code=EXIT_SETUP, as_json=as_json, kind="InvalidInput")
    with cli_errors(as_json), _client() as rc:
        try:
            out = getattr(rc, method.name)(**kwargs)
        except UnknownAgentError as exc:
            fail(str(exc), code=EXIT_INPUT, as_json=as_json, kind=type(exc).__name__)
        except InvalidInput as exc:
            code = EXIT_INPUT if str(exc).startswith("unknown_handle") else EXIT_SETUP
            fail(str(exc), code=code, as_json=as_json, kind=type(exc).__name__)
    if as_json:
        echo_json(out)
    else:
        typer.echo(method.render(out))


def _command(method: Method) -> Callable[..., None]:
    """A function whose signature typer reads: the method's arguments, then ``--json``."""
    params = []
    for arg in method.args:
        if arg.kind == "list":
            default: Any = typer.Argument(..., help=arg.help, show_default=False)
            annotation: Any = list[str]
        elif arg.option:
            default = typer.Option(None, f"--{arg.name.replace('_', '-')}", help=arg.help, show_default=False)
            annotation = str | None
        else:
            default = typer.Argument(..., help=arg.help, show_default=False)
            annotation = str
        params.append(inspect.Parameter(arg.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                        annotation=annotation))
    params.append(inspect.Parameter("as_json", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=bool,
                                    default=typer.Option(False, "--json", help="Print the result as JSON.")))

    def command(**values: Any) -> None:
        as_json = bool(values.pop("as_json", False))
        _run(method, values, as_json)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = method.name
    command.__doc__ = method.help
    return command


for _method in METHODS:
    runtime.command(_method.name)(_command(_method))
