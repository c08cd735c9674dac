"""``ParseOutputComponent`` (kind ``output_plumbing``): parsing, signals, settling (docs/formats.md §5.6
*Output*)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.messages import response_text
from rsi_common.kernel.types import ParsedStep, Signal

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime
    from rsi_common.llm import ModelResponse

__all__ = ["MARKER_RE", "ParseOutputComponent", "extract_json", "settle_text"]

MARKER_RE = re.compile(r"^\[(DONE|BLOCKED|FAILED)(?::\s*(.*))?\]\s*$")
_MARKER_SIGNAL: dict[str, Signal] = {"DONE": "complete", "BLOCKED": "blocked", "FAILED": "error"}
_STATUS_SIGNAL: dict[str, Signal] = {"done": "complete", "blocked": "blocked", "failed": "error"}
_FENCE_RE = re.compile(r"```json[ \t]*\n(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()


def extract_json(text: str) -> tuple[bool, Any]:
    """The whole text as JSON, else the first fenced json block, else the first ``{…}`` that parses."""
    try:
        return True, json.loads(text)
    except ValueError:
        pass
    for m in _FENCE_RE.finditer(text):
        try:
            return True, json.loads(m.group(1))
        except ValueError:
            continue
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        return True, obj
    return False, None


def settle_text(text: str, schema: dict[str, Any] | None) -> str:
    """With a schema: the extracted JSON as ``json.dumps(obj, ensure_ascii=False)``, else ``text``."""
    if not schema:
        return text
    ok, obj = extract_json(text)
    return json.dumps(obj, ensure_ascii=False) if ok else text


def _regex_signal(text: str) -> tuple[Signal | None, str, str]:
    """``(signal, message, text without the marker line)`` from the last non-blank line."""
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if not lines[i].strip():
            continue
        m = MARKER_RE.match(lines[i].strip())
        if m is None:
            return None, "", text
        rest = "\n".join(lines[:i] + lines[i + 1:]).rstrip()
        return _MARKER_SIGNAL[m.group(1)], (m.group(2) or "").strip(), rest
    return None, "", text


def _structured_signal(text: str) -> tuple[Signal | None, str]:
    ok, obj = extract_json(text)
    if not ok or not isinstance(obj, dict):
        return None, ""
    signal = _STATUS_SIGNAL.get(str(obj.get("status", "")))
    if signal is None:
        return None, ""
    return signal, str(obj.get("message") or obj.get("reason") or "")


class ParseOutputComponent(Component):
    """Parses a model response into final text, tool calls and a completion signal.

    ``signal_detector``: ``regex`` (markers ``[DONE]``, ``[BLOCKED: why]``, ``[FAILED: why]`` on the
    last non-blank line, only with ``completion_markers``; the marker line is removed), ``structured``
    (the final JSON object's ``status`` ∈ done/blocked/failed; only with an output schema), or
    ``hybrid`` (structured, then regex); unknown → regex. ``completion_markers`` is read only when the
    regex detector runs. ``settle`` reads no param.
    """

    KIND: ClassVar[str] = "output_plumbing"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "signal_detector": ("regex", "'regex' (completion markers), 'structured' (JSON status) or 'hybrid'"),
        "completion_markers": (True, "honour [DONE] / [BLOCKED: …] / [FAILED: …] on the last line"),
    }

    def parse(self, rt: TurnRuntime, response: ModelResponse) -> ParsedStep:
        """Final text (text blocks joined), pending ``tool_use`` blocks and the detected signal."""
        text = response_text(response.content)
        calls = [dict(b) for b in response.content if isinstance(b, dict) and b.get("type") == "tool_use"]
        detector = self.param_str("signal_detector")
        if detector not in ("regex", "structured", "hybrid"):
            detector = "regex"
        signal: Signal | None = None
        message = ""
        if detector in ("structured", "hybrid") and rt.config.output_schema:
            signal, message = _structured_signal(text)
        if signal is None and detector in ("regex", "hybrid") and self.param_bool("completion_markers"):
            signal, message, text = _regex_signal(text)
        return ParsedStep(final_text=text, tool_calls=calls, signal=signal, signal_message=message)

    def settle(self, text: str, schema: dict[str, Any] | None) -> str:
        """Turn-end settling of the final text against the output schema (see :func:`settle_text`)."""
        return settle_text(text, schema)
