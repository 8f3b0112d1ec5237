"""Authentication, CSRF and response headers for the console.

Why these choices:

- **Auth** is one shared token, accepted as a Bearer token or as the password of
  HTTP basic auth, compared in constant time. Basic auth needs no login page and
  no session store, and every browser and ``curl -u`` speaks it.
- **CSRF**: every action is a POST carrying a token that is an HMAC of a random,
  HttpOnly, SameSite=Strict session cookie under a per-process secret. A page
  on another origin can neither read the cookie nor compute the token; a POST
  without it (or with another session's) is refused with 403 and changes
  nothing. A cross-origin ``Origin`` header is refused as well.
- **Headers**: a strict Content-Security-Policy (scripts and styles only from
  the console itself, no inline script), no framing, no sniffing, no referrer.
  Output is escaped by Jinja2's autoescape, so job data renders as text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import urllib.parse

from starlette.requests import Request

SESSION_COOKIE = "jw_session"
CSRF_FIELD = "csrf"

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: with no-referrer browsers send `Origin: null` on
    # form posts, which the Origin check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def authorized(request: Request, token: str | None) -> bool:
    """True when no token is configured or the request carries it."""
    if token is None:
        return True
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    offered: str | None = None
    if scheme.lower() == "bearer":
        offered = value.strip()
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        offered = decoded.partition(":")[2]
    if offered is None:
        return False
    return hmac.compare_digest(offered.encode(), token.encode())


def new_session() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(secret: bytes, session: str) -> str:
    return hmac.new(secret, session.encode(), hashlib.sha256).hexdigest()


def csrf_ok(secret: bytes, session: str | None, offered: str | None) -> bool:
    # compare_digest takes str only when ASCII (TypeError otherwise: a 500).
    if not session or not offered or not offered.isascii():
        return False
    return hmac.compare_digest(csrf_token(secret, session).encode(), offered.encode())


def same_origin(request: Request) -> bool:
    """A browser's Origin header, when present, must name this console's host."""
    origin: str | None = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host: str = request.headers.get("host", "")
    return urllib.parse.urlsplit(origin).netloc == host
