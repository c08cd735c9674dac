"""``StandardControlComponent`` (kind ``control_flow``): the single decision point (docs/formats.md §5.6
*Control*)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.types import Decision, ParsedStep
from rsi_common.llm import KERNEL_NOTE_TAG

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime

__all__ = ["REVIEW_NOTE", "WRAP_UP_NOTE", "StandardControlComponent"]

REVIEW_NOTE = (
    KERNEL_NOTE_TAG + "Before finishing: give the user a final answer that reflects the tool results, "
    "including any failure.</kernel_note>"
)
"""The completion-review note (a kernel note: the sim model never reads it as the user's input)."""
WRAP_UP_NOTE = (
    KERNEL_NOTE_TAG + "This turn has used most of its input budget. Wrap up now: give the user your "
    "final answer with what you have.</kernel_note>"
)


class StandardControlComponent(Component):
    """``decide(rt, step, tools_ran)`` → continue | complete | suspend | error | escalate.

    1. base decision from the step; 2. completion review (once per turn); 3. repeat-stop;
    4. turn input budget. Reads: ``completion_review`` when the base decision is *complete* and tools
    were exposed this turn; ``repeat_stop_after`` and ``turn_budget_soft``/``turn_budget_hard`` on
    every decision unless the host kwarg (``repeat_stop_after``, ``turn_input_budget_tokens``) is set.
    Steps 3–4 only act on a *continue* decision (a finished turn is never re-labelled).
    """

    KIND: ClassVar[str] = "control_flow"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "completion_review": (True, "once per turn, ask for a final answer if it is blank or a tool failed"),
        "repeat_stop_after": (3, "stop when the last n steps requested the same tool calls (0 = off)"),
        "turn_budget_soft": (1_000_000, "input tokens of main calls after which a wrap-up note is added"),
        "turn_budget_hard": (3_000_000, "input tokens of main calls at which the turn is suspended"),
    }

    def decide(self, rt: TurnRuntime, step: ParsedStep, tools_ran: bool) -> Decision:
        """The control decision for the step just taken."""
        decision = self._base(step, tools_ran)
        decision = self._review(rt, step, decision)
        repeat_after = self._repeat_after(rt)
        budget = self._budget(rt)
        if decision.action != "continue":
            return decision
        if repeat_after > 0 and _repeated(rt.step_call_sets, repeat_after):
            return Decision("complete", "REPEAT_STOP",
                            f"the last {repeat_after} steps repeated the same tool calls")
        soft, hard = budget
        if soft > 0 and hard > 0:
            used = rt.main_input_tokens()
            if used >= hard:
                return Decision("suspend", "TURN_INPUT_BUDGET", f"{used} input tokens ≥ hard budget {hard}")
            if used >= soft and not rt.soft_budget_noted:
                rt.soft_budget_noted = True
                rt.add_note(WRAP_UP_NOTE)
                rt.emit("control.wrap_up", used=used)
        return decision

    @staticmethod
    def _base(step: ParsedStep, tools_ran: bool) -> Decision:
        if tools_ran:
            return Decision("continue")
        if step.signal == "complete":
            return Decision("complete", "COMPLETED")
        if step.signal == "blocked":
            return Decision("escalate", "USER_INPUT_REQUIRED",
                            step.signal_message or "the agent needs user input")
        if step.signal == "error":
            return Decision("error", "AGENT_ERROR", step.signal_message or "the agent reported a failure")
        return Decision("complete", "COMPLETED")

    def _review(self, rt: TurnRuntime, step: ParsedStep, decision: Decision) -> Decision:
        if decision.action != "complete" or not rt.tools_exposed:
            return decision
        if not self.param_bool("completion_review") or rt.review_done:
            return decision
        if step.final_text.strip() and not rt.last_tool_error:
            return decision
        rt.review_done = True
        rt.add_note(REVIEW_NOTE)
        rt.emit("control.completion_review")
        return Decision("continue")

    def _repeat_after(self, rt: TurnRuntime) -> int:
        kw = rt.kwarg("repeat_stop_after")
        if kw is not None:
            return int(kw)
        return self.param_int("repeat_stop_after")

    def _budget(self, rt: TurnRuntime) -> tuple[int, int]:
        kw = rt.kwarg("turn_input_budget_tokens")
        if kw is not None:
            if isinstance(kw, list | tuple) and len(kw) == 2:
                return int(kw[0]), int(kw[1])
            return 0, 0
        return self.param_int("turn_budget_soft"), self.param_int("turn_budget_hard")


def _repeated(step_call_sets: list[list[str]], n: int) -> bool:
    """The last ``n`` steps each requested the same non-empty multiset of tool calls."""
    if len(step_call_sets) < n:
        return False
    last = step_call_sets[-n:]
    return bool(last[0]) and all(s == last[0] for s in last)
