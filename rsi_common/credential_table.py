"""The credential pattern table (``docs/security/credentials.md``): one row per credential shape.

A row is a :class:`CredentialPattern`: a label (what error messages name), a regex, the lowercase
*anchors* of the cheap prefilter (the regex can only match a text whose lowercase form contains one of
them) and, for the shapes that plain regexes cannot tell from prose, a ``check`` on each match.

The first nine rows are the project's original patterns with their labels and regexes unchanged (the
critic's list in ``docs/security/credentials.md``); the rows after them extend the table. Use
:func:`rsi_common.credentials.find_credentials` or :func:`rsi_common.credentials.redact`, which
normalise the text first: a regex of this table applied to raw text misses a key with a zero-width
character inside.

No literal of this module is itself credential-shaped: the regexes name prefixes only.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

__all__ = ["PATTERNS", "WINDOW_AFTER", "CredentialPattern", "is_placeholder", "tokenish"]


WINDOW_AFTER = 256
"""Characters after an anchor's start that a window covers: more than the shortest match of any row
needs past its anchor (a longer match is re-read from its start without the window's end)."""


@dataclass(frozen=True)
class CredentialPattern:
    """One row of the table.

    Attributes:
        label: the name error messages and precheck reasons show (never the matched text).
        regex: the shape; a named group ``value`` marks the secret part (the part ``redact`` replaces).
        anchors: lowercase literals, one of which every match contains (the prefilter).
        shape: a one-line description with a placeholder example (documentation and tests).
        check: an extra test of a match (``None`` = every match counts).
        before: how far before an anchor a match can start (the window reaches that far back).
        gate: a cheap regex that must match right after an anchor in the lower-cased text for the
            occurrence to open a window (e.g. a ``:`` or ``=`` after ``password``).
        tail: what follows a match and is redacted with it (the body of a private key after its
            header line); detection needs only :attr:`regex`.
    """

    label: str
    regex: re.Pattern[str]
    anchors: tuple[str, ...]
    shape: str
    check: Callable[[re.Match[str]], bool] | None = None
    before: int = 0
    gate: re.Pattern[str] | None = None
    tail: re.Pattern[str] | None = None

    def secret_span(self, m: re.Match[str]) -> tuple[int, int]:
        """The part of a match ``redact`` replaces: the ``value`` group, else the match, plus :attr:`tail`."""
        start, end = m.span("value") if "value" in self.regex.groupindex else m.span()
        if self.tail is not None:
            follow = self.tail.match(m.string, end)
            end = follow.end() if follow is not None else end
        return start, end

    def windows(self, low: str, present: Collection[str] | None = None,
                memo: dict[tuple[str, str], list[int]] | None = None) -> list[tuple[int, int]]:
        """Disjoint ``(start, end)`` spans of ``low`` (a lower-cased text) around each occurrence of an
        anchor (only those in ``present`` when given) that passes :attr:`gate`; every match of
        :attr:`regex` starts in one of them. ``memo`` shares the occurrences between patterns."""
        starts: list[int] = []
        for anchor in self.anchors:
            if present is not None and anchor not in present:
                continue
            key = (anchor, self.gate.pattern if self.gate is not None else "")
            found = memo.get(key) if memo is not None else None
            if found is None:
                found = [m.start() for m in _finder(*key).finditer(low)]
                if memo is not None:
                    memo[key] = found
            starts += found
        merged: list[tuple[int, int]] = []
        for i in sorted(starts):
            start, end = max(0, i - self.before), min(len(low), i + WINDOW_AFTER)
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

    def finditer(self, text: str, low: str | None = None, present: Collection[str] | None = None,
                 memo: dict[tuple[str, str], list[int]] | None = None) -> Iterator[re.Match[str]]:
        """The matches in ``text`` that pass :attr:`check`, each read in full from its start.

        Args:
            text: normalised text.
            low: ``text.lower()``, to search only around anchors; ``None`` (or a lower-cased form of
                another length) scans the whole text.
            present: the anchors known to occur in ``low`` (others are not searched for).
            memo: occurrences shared between the patterns of one scan.
        """
        if low is not None and len(low) == len(text):
            spans = self.windows(low, present, memo)
        else:
            spans = [(0, len(text))]
        for start, end in spans:
            for window_match in self.regex.finditer(text, start, end):
                m = self.regex.match(text, window_match.start())
                if m is not None and (self.check is None or self.check(m)):
                    yield m

    def hits(self, text: str, low: str | None = None, present: Collection[str] | None = None,
             memo: dict[tuple[str, str], list[int]] | None = None) -> bool:
        """Whether :meth:`finditer` yields at least one match (stops at the first)."""
        return next(self.finditer(text, low, present, memo), None) is not None


@functools.cache
def _finder(anchor: str, gate: str) -> re.Pattern[str]:
    """The occurrences of ``anchor`` followed by ``gate`` (one C-level scan of the lower-cased text)."""
    return re.compile(re.escape(anchor) + (f"(?={gate})" if gate else ""))


# --- value checks --------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(
    r"""(?ix)
    (?: < | \$\{? [a-z_] | \{ | %\( | \*{3} | x{4} | \.{3} | … | \[? redacted | \#{3} )
    | (?: change[_\-]?me | placeholder | your[_\-] | insert[_\-] | enter[_\-] | replace[_\-] )
    | (?: example | sample | dummy | fake | test | todo | tbd | fixme | set[_\-]?me ) (?: [_\-.] | $ )
    | (?: none | null | nil | undefined | required | optional | empty | hidden | masked | omitted | secret
        | password | passwd | pass | pwd | pw | token | string | value | true | false | unknown | invalid
        | incorrect | missing | expired | revoked | provided | here | same | default | blank ) $
    """
)
"""A value that only stands for a secret: ``<token>``, ``${VAR}``, ``{name}``, ``***``, ``xxxx``,
``changeme``, ``your_api_key``, or one of a few words (``required``, ``none``, …) as the whole value."""
_TYPE_NAME = re.compile(r"(?:[A-Z][a-z]+){2,}")
"""A type in an annotation (``api_key: SecretStr``): two or more capitalised words, letters only."""

_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_INNER_UPPER = re.compile(r".[A-Z]")


def is_placeholder(value: str) -> bool:
    """``value`` stands for a secret instead of being one (``<token>``, ``${X}``, ``changeme``, an
    environment variable name such as ``OPENAI_API_KEY``, a dotted attribute path such as
    ``settings.api_key``, a type name such as ``SecretStr``)."""
    return bool(_PLACEHOLDER.match(value) or _ENV_NAME.fullmatch(value) or _DOTTED.fullmatch(value)
                or _TYPE_NAME.fullmatch(value))


def tokenish(value: str) -> bool:
    """``value`` looks generated rather than written: it has a digit, an upper-case letter after the
    first character, or one of ``_ + / = ! @ # $ % ^ & * ~``. Prose words (``approved``,
    ``keep-it-simple``, ``Authentication``) do not."""
    return (any(c.isdigit() for c in value) or _INNER_UPPER.search(value) is not None
            or any(c in "_+/=!@#$%^&*~" for c in value))


def _value(m: re.Match[str]) -> str:
    return m.group("value")


def _not_placeholder(m: re.Match[str]) -> bool:
    return not is_placeholder(_value(m))


def _generated(m: re.Match[str]) -> bool:
    value = _value(m)
    return tokenish(value) and not is_placeholder(value)


_BARE_KEYS = frozenset({"password", "secret", "token", "passphrase"})
_COUNTER_KEY = re.compile(
    r"(?i)(?:.*[_.\-])?(?:page|next|prev|previous|continuation|sync|cursor|max|min|num|total|input|output"
    r"|completion|prompt|reasoning|cached)[_.\-]?token"
)
"""``page_token``, ``next_token``, ``max_token``, …: pagination cursors and counters, not secrets."""


def _assignment(m: re.Match[str]) -> bool:
    """An assignment counts unless its value is a placeholder, a call or index (``os.getenv(…)``),
    or — after a bare prose word (``password``, ``secret``, ``token``) — a plain word."""
    value = _value(m)
    called = m.string[m.end():m.end() + 1] in ("(", "[")
    if is_placeholder(value) or called or _COUNTER_KEY.fullmatch(m["key"]):
        return False
    return m.group("key").lower() not in _BARE_KEYS or tokenish(value)


def _basic_credentials(m: re.Match[str]) -> bool:
    """The base64 value decodes to printable ``user:password`` text."""
    value = _value(m)
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
        text = raw.decode("ascii")
    except (binascii.Error, ValueError):
        return False
    user, sep, password = text.partition(":")
    return bool(sep and user and password and text.isprintable())


# --- the table -----------------------------------------------------------------------------------

_TOK = r"[A-Za-z0-9_\-]"
_SEP = r"""["']?\s*(?::=|=>|:|=)\s*["']?"""
_ASSIGN_KEY = (
    r"(?P<key>(?:[A-Za-z0-9]+[_.\-])*(?:api[_\-]?key|apikey|access[_\-]?key|secret(?:[_\-]?key)?"
    r"|client[_\-]?secret|token|passw(?:or)?d|pwd|passphrase))"
)
_QUERY_NAME = (
    r"(?:(?:client_|app_)?secret|pass(?:word|wd|phrase)?|pwd|api[_\-]?key|apikey|sig"
    r"|(?:(?:access|refresh|id|auth|session|oauth|private|security|x-amz-security)[_\-]?)?token"
    r"|(?:x-(?:amz|goog)-)?signature)"
)


def _p(label: str, regex: str, anchors: tuple[str, ...], shape: str, *,
       check: Callable[[re.Match[str]], bool] | None = None, before: int = 0,
       gate: re.Pattern[str] | None = None, tail: re.Pattern[str] | None = None) -> CredentialPattern:
    return CredentialPattern(label, re.compile(regex), anchors, shape, check, before, gate, tail)


_NL = r"(?:\r?\n|\\n)"
_KEY_BODY = re.compile(
    rf"(?:{_NL}[A-Za-z\-]+:[^\n]*|(?:{_NL}|[ \t])+[A-Za-z0-9+/=]{{2,}})*"
    rf"(?:(?:{_NL}|\s)*-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----)?"
)
"""The body of a PEM or PGP private key after its header (base64 lines, ``Proc-Type:`` fields, the END
line), with real or escaped (``\\n``) line breaks."""


_ASSIGNED = re.compile(r"""[a-z0-9_.\-]{0,40}["']?\s*[:=]""")
"""Gate of the assignment shapes: the anchor's identifier continues, then ``:`` or ``=`` follows."""
_SPACED = re.compile(r"\s+[a-z0-9]")
"""Gate of ``Bearer``/``Basic``: a value follows after white space."""
_GITLAB = ("gldt-", "glrt-", "glptt-", "glft-", "glsoat-", "glcbt-", "gloas-", "glimt-", "glagent-",
           "gr1348941")

PATTERNS: tuple[CredentialPattern, ...] = (
    # --- the original nine (labels and regexes unchanged) ---
    _p("google api key", r"AIza[0-9A-Za-z_\-]{35}", ("aiza",), "AIza + 35 [A-Za-z0-9_-]"),
    _p("secret key", r"\bsk-[A-Za-z0-9_\-]{20,}", ("sk-",), "sk- + 20 or more [A-Za-z0-9_-]"),
    _p("api key assignment", r"(?i)api[_-]?key\s*[:=]\s*[\"'][^\"'\s]{8,}[\"']", ("api",),
       "api_key = '<8 or more chars>' (quoted)", gate=_ASSIGNED),
    _p("private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----", ("-----begin",),
       "-----BEGIN <TYPE> PRIVATE KEY-----", tail=_KEY_BODY),
    _p("aws key", r"\bAKIA[0-9A-Z]{16}\b", ("akia",), "AKIA + 16 [A-Z0-9] (access key id)"),
    _p("github token", r"\bghp_[A-Za-z0-9]{20,}", ("ghp_",), "ghp_ + 20 or more [A-Za-z0-9]"),
    _p("gitlab token", r"\bglpat-[A-Za-z0-9_\-]{20,}", ("glpat-",), "glpat- + 20 or more [A-Za-z0-9_-]"),
    _p("slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", ("xox",), "xoxb-/xoxp-/… + 10 or more"),
    _p("json secret", r"(?i)\"(api_key|apikey|secret|password|access_token)\"\s*:\s*\"[^\"]{8,}\"",
       ("api", "secret", "password", "access_token"), '"password": "<value>" (value of 8 or more chars)',
       before=1, gate=_ASSIGNED),
    # --- extensions ---
    _p("jwt", rf"\beyJ{_TOK}{{10,}}\.{_TOK}{{10,}}\.{_TOK}*", ("eyj",),
       "eyJ<header>.<payload>.<signature> (base64url segments)"),
    _p("url with password", r"://[^\s/?#@:\"'<>]*:(?P<value>[^\s/?#@\"'<>]+)@", ("://",),
       "<scheme>://<user>:<password>@<host> (any scheme; user may be empty)", check=_not_placeholder),
    _p("url query secret", rf"[?&;](?i:{_QUERY_NAME})=(?P<value>[^&#\s\"'<>]{{3,}})",
       ("pass", "pwd", "token", "key", "secret", "sig"),
       "?password=<value>, &token=<value>, &sig=<value>, … in a URL query",
       check=_not_placeholder, before=24, gate=_ASSIGNED),
    _p("authorization header",
       r"(?i:\b(?:proxy-)?authorization)" + _SEP
       + r"(?:(?i:bearer|basic|token|digest|apikey|api-key|key)\s+)?(?P<value>[A-Za-z0-9\-._~+/=:]{8,})",
       ("authorization",), "Authorization: <scheme> <credentials>",
       check=_generated, before=6, gate=_ASSIGNED),
    _p("bearer token", r"(?i:\bbearer)\s+(?P<value>[A-Za-z0-9\-._~+/]{16,}=*)", ("bearer",),
       "Bearer <16 or more token chars>", check=_generated, gate=_SPACED),
    _p("basic auth", r"(?i:\bbasic)\s+(?P<value>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", ("basic",),
       "Basic <base64 of user:password>", check=_basic_credentials, gate=_SPACED),
    _p("github app token", r"\bgh[osur]_[A-Za-z0-9]{20,}", ("gho_", "ghs_", "ghu_", "ghr_"),
       "gho_/ghu_/ghs_/ghr_ + 20 or more [A-Za-z0-9]"),
    _p("github fine-grained token", r"\bgithub_pat_[A-Za-z0-9_]{22,}", ("github_pat_",),
       "github_pat_ + 22 or more [A-Za-z0-9_]"),
    _p("stripe key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}", ("k_live_", "k_test_"),
       "sk_live_/rk_live_/sk_test_/rk_test_ + 16 or more [A-Za-z0-9]", before=1),
    _p("stripe webhook secret", r"\bwhsec_[A-Za-z0-9+/=]{24,}", ("whsec_",), "whsec_ + 24 or more"),
    _p("aws secret key",
       r"(?i:aws_?secret_?(?:access_?)?key|secret_?access_?key)" + _SEP
       + r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
       ("secret",), "aws_secret_access_key = <40 [A-Za-z0-9/+=]>",
       check=_not_placeholder, before=4, gate=_ASSIGNED),
    _p("aws temporary key", r"\bASIA[0-9A-Z]{16}\b", ("asia",), "ASIA + 16 [A-Z0-9] (STS key id)"),
    _p("secret assignment",
       r"(?i)(?<![A-Za-z0-9_.\-])" + _ASSIGN_KEY + _SEP + r"(?P<value>[^\s\"'<>(){}\[\],;`]{8,})",
       ("key", "secret", "token", "pass", "pwd"),
       "api_key: <value>, password=<value>, client_secret => <value> (value of 8 or more chars)",
       check=_assignment, before=128, gate=_ASSIGNED),
    _p("anthropic key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", ("sk-ant-",), "sk-ant- + 20 or more"),
    _p("openai key", r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}",
       ("sk-proj-", "sk-svcacct-", "sk-admin-"), "sk-proj-/sk-svcacct-/sk-admin- + 20 or more"),
    _p("slack webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
       ("hooks.slack.com",), "https://hooks.slack.com/services/<T…>/<B…>/<secret>"),
    _p("slack app token", r"\bxapp-\d-[A-Za-z0-9\-]{10,}", ("xapp-",), "xapp-<n>- + 10 or more"),
    _p("google oauth secret", r"\bGOCSPX-[A-Za-z0-9_\-]{20,}", ("gocspx-",), "GOCSPX- + 20 or more"),
    _p("pgp private key", r"-----BEGIN PGP PRIVATE KEY BLOCK-{5}", ("-----begin",),
       "the armor line BEGIN PGP PRIVATE KEY BLOCK between five dashes each side", tail=_KEY_BODY),
    _p("gitlab other token",
       r"\b(?:gl(?:dt|rt|ptt|ft|soat|cbt|oas|imt|agent)-|GR1348941)[A-Za-z0-9_\-]{20,}", _GITLAB,
       "gldt-/glrt-/glptt-/… or GR1348941 + 20 or more"),
    _p("npm token", r"\bnpm_[A-Za-z0-9]{36}\b", ("npm_",), "npm_ + 36 [A-Za-z0-9]"),
    _p("pypi token", r"\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_\-]{50,}", ("pypi-age",),
       "pypi-AgEIcHlwaS5vcmc + 50 or more (test.pypi.org: pypi-AgENdGVzdC5weXBpLm9yZw…)"),
    _p("sendgrid key", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}\b", ("sg.",), "SG.<22>.<43>"),
    _p("huggingface token", r"\bhf_[A-Za-z0-9]{34,}", ("hf_",), "hf_ + 34 or more [A-Za-z0-9]"),
    _p("azure storage key", r"(?i:accountkey)=(?P<value>[A-Za-z0-9+/]{40,}={0,2})", ("accountkey=",),
       "AccountKey=<base64 of 40 or more> (connection string)"),
)
"""The table, in report order: the original nine first, then the extensions."""
