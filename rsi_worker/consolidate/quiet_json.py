"""A no-signal run's stored context encoded with its pool's worlds joined from remembered pieces
(docs/performance/consolidation.md#the-no-signal-path).

A quiet run's row keeps its whole context (``RoundContext.to_json``) for the audit trail, of which the
60 loaded world ids (``loaded``) and their signal digests (``digests``) are nine tenths of the text
(~5 KB) and, from one run to the next, 59 of 60 the same. :func:`context_json` encodes the rest of the
context as ``json_dumps`` does and joins those two members from each world's encoded pieces, kept per
process by world id and digest: the same text, character for character, as ``json_dumps`` of the whole
context (``json.dumps`` with its default separators and ``ensure_ascii``; a piece is ``json.dumps`` of
its own value), bound as an :class:`~rsi_common.db.engine.EncodedJSON`.

Project decision: at most :data:`PIECES_MEMO_MAX` worlds' pieces (emptied when full).
"""

from __future__ import annotations

import json
import secrets

from rsi_common.db.engine import EncodedJSON, json_dumps
from rsi_worker.consolidate.context import RoundContext

__all__ = ["PIECES_MEMO_MAX", "context_json"]

PIECES_MEMO_MAX = 8192
"""Worlds whose encoded id and digest entry are kept per process."""

_PIECES: dict[tuple[str, str], tuple[str, str]] = {}
_MARK = secrets.token_hex(16)
_LOADED_AT, _DIGESTS_AT = f"\x00loaded {_MARK}", f"\x00digests {_MARK}"
"""The two members' places in the encoded rest: strings no stored value holds (a process secret; a text
that holds one twice is encoded plainly)."""
_LOADED, _DIGESTS = json.dumps(_LOADED_AT), json.dumps(_DIGESTS_AT)


def _piece(wid: str, digest: str) -> tuple[str, str]:
    """``json.dumps(wid)`` and the ``"wid": "digest"`` member, remembered."""
    found = _PIECES.get((wid, digest))
    if found is None:
        key = json.dumps(wid)
        found = (key, f"{key}: {json.dumps(digest)}")
        if len(_PIECES) >= PIECES_MEMO_MAX:
            _PIECES.clear()
        _PIECES[(wid, digest)] = found
    return found


def context_json(ctx: RoundContext) -> EncodedJSON:
    """``ctx.to_json()`` encoded as a JSON column is (``json_dumps``: the same text) with ``loaded`` and
    ``digests`` joined from remembered pieces; the plain encoding when a digest is missing or the two
    do not name the same worlds in the same order (then nothing is gained by joining).

    Raises:
        ValueError: as ``json_dumps`` (a value that is not JSON: NaN, infinity).
    """
    data = ctx.to_json()
    loaded, digests = data["loaded"], data["digests"]
    if list(digests) != loaded or not all(isinstance(d, str) for d in digests.values()):
        return EncodedJSON(json_dumps(data))
    pieces = [_piece(wid, digests[wid]) for wid in loaded]
    data["loaded"], data["digests"] = _LOADED_AT, _DIGESTS_AT
    text = json_dumps(data)
    if text.count(_LOADED) != 1 or text.count(_DIGESTS) != 1:
        data["loaded"], data["digests"] = loaded, digests
        return EncodedJSON(json_dumps(data))
    return EncodedJSON(text.replace(_LOADED, "[" + ", ".join(p[0] for p in pieces) + "]")
                       .replace(_DIGESTS, "{" + ", ".join(p[1] for p in pieces) + "}"))
