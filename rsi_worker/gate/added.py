"""What a candidate *adds*: the text the gate screens (docs/security/gate.md, "Added text").

Read from the parsed harnesses, not from the diff, so JSON escapes (``\\u0069gnore``) and line
breaks cannot hide text. For every changed address (:func:`~rsi_common.harness.addresses.
changed_between`):

* a param leaf: the strings under the candidate's value (dict keys included; numbers as their decimal
  text) that the incumbent's value at the same address does not hold (a multiset difference, so an
  unchanged block of a list is not screened again); a new key's own name;
* a file: its lines that the incumbent's version of the file does not have, as one text;
* a manifest or component ``description``, the manifest ``name``, a new component's id: the new value.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rsi_common.harness import Harness
from rsi_common.harness.addresses import address_values, changed_between
from rsi_worker.gate.text import json_strings

__all__ = ["Added", "added_texts"]


@dataclass(frozen=True)
class Added:
    """One added text and the address it sits at."""

    address: str
    text: str


def _file_lines(new: str, old: str | None) -> str:
    known = set((old or "").splitlines())
    return "\n".join(line for line in new.splitlines() if line not in known)


def added_texts(inc: Harness, cand: Harness) -> list[Added]:
    """The added texts of ``cand`` against ``inc``, in address order (module docstring)."""
    a = address_values(inc.manifest, inc.files)
    b = address_values(cand.manifest, cand.files)
    out: list[Added] = []
    for addr in changed_between(inc.manifest, inc.files, cand.manifest, cand.files):
        if addr not in b:
            continue  # removed: nothing added
        new, old = b[addr], a.get(addr)
        if ".files." in addr and isinstance(new, str):
            texts = [_file_lines(new, old if isinstance(old, str) else None)]
        elif isinstance(new, tuple):  # a new component (kind, impl): its id is text too
            texts = [addr]
        else:
            seen = Counter(json_strings(old)) if addr in a else Counter[str]()
            texts = []
            for s in json_strings(new):
                if seen[s] > 0:
                    seen[s] -= 1
                else:
                    texts.append(s)
            if addr not in a and ".params." in addr:
                texts.append(addr.rsplit(".", 1)[-1])
        out.extend(Added(addr, t) for t in texts if t.strip())
    return out
