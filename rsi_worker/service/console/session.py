"""Console login and CSRF (docs/service/access.md, *Console*).

**Login.** A person pastes an API token (scope ``viewer`` at least) into the login form. The service
verifies it and sets the cookie :data:`COOKIE` holding that token: ``HttpOnly`` (no script reads it),
``SameSite=Strict`` (no other site's page sends it), ``Secure`` when the request came over HTTPS
(directly or through a proxy's ``X-Forwarded-Proto``), ``Path=/console``, 12 hours. Every console
request verifies the token again (revocation ends the session within the token cache time). The
cookie is the only session state: any replica serves any request.

**CSRF.** Every state-changing form carries ``csrf``, an HMAC-SHA-256 of a fixed label keyed with the
session's token: a page of another origin can neither read the cookie nor compute the value, and the
server needs no stored state to check it (constant-time comparison). The login form itself uses a
double-submit value: a random ``rsi_login_csrf`` cookie (``SameSite=Strict``) that the form repeats.
A POST without a matching value is refused with 403 and changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import Request, Response

__all__ = [
    "COOKIE",
    "LOGIN_COOKIE",
    "MAX_AGE_S",
    "check_csrf",
    "check_login",
    "clear_session",
    "csrf_for",
    "login_value",
    "set_login_cookie",
    "set_session",
]

COOKIE = "rsi_console"
LOGIN_COOKIE = "rsi_login_csrf"
MAX_AGE_S = 12 * 3600
PATH = "/console"


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def csrf_for(token: str) -> str:
    """The CSRF value of the session of ``token``."""
    return hmac.new(token.encode(), b"rsi-console-csrf/1", hashlib.sha256).hexdigest()[:40]


def check_csrf(token: str, given: str | None) -> bool:
    """Whether the form's value matches the session (constant time)."""
    return bool(given) and hmac.compare_digest(csrf_for(token), str(given))


def set_session(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE, token, max_age=MAX_AGE_S, path=PATH, httponly=True, samesite="strict", secure=_secure(request)
    )
    response.delete_cookie(LOGIN_COOKIE, path=PATH)


def clear_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")


def login_value(request: Request) -> tuple[str, bool]:
    """The login form's double-submit value and whether it is new (then set it with
    :func:`set_login_cookie`)."""
    value = request.cookies.get(LOGIN_COOKIE)
    if value and len(value) == 32:
        return value, False
    return secrets.token_hex(16), True


def set_login_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        max_age=3600,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def check_login(expected: str | None, given: str | None) -> bool:
    """Whether the login form repeats its cookie's value (constant time)."""
    return bool(expected) and bool(given) and hmac.compare_digest(str(expected), str(given))
