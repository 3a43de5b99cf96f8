"""Who and what the dashboard answers: the request's size, its Host header, the token and sessions.

:class:`Guard` wraps the application (ASGI middleware) and, before any route runs, refuses

- a request target (path and query) longer than :data:`MAX_TARGET` bytes: **414**;
- a Host header that names none of the dashboard's names: **421**. This holds on every address the
  server is bound to (a web page on another site that rebinds its own name to this machine's address
  sends that name, so it is refused: no DNS rebinding). The names are the loopback names, the bound
  name or address, this machine's host name when bound beyond loopback, and ``--allowed-host``; an
  IP address is also allowed when it is the one the connection arrived at (no name can be rebound to
  an address written as digits);
- with a token, a request carrying neither the token nor a valid session: **401**.

Sessions (:class:`Sessions`): ``?token=TOKEN`` once sets a cookie ``<id>.<expiry>.<mac>``: a random
id, when it expires, and an HMAC-SHA256 of both under a secret the process draws when it starts. It
holds nothing derived from the token, expires after ``session_s`` seconds, and a restart (a new
secret) ends every session at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import math
import secrets
import socket
import time
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from madengine.core.errors import InputError
from madengine.server.config import LOOPBACK_NAMES, ServerConfig, host_of_header, normalize_host

COOKIE = "madengine_dashboard"
MAX_TARGET = 32 * 1024  #: bytes of path and query; the longest filters a person can ask for take far less
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


class Sessions:
    """Signed session cookies that expire; the secret lives only in this process."""

    def __init__(self, lifetime_s: float, clock: Callable[[], float] = time.time) -> None:
        self.lifetime_s = lifetime_s
        self.clock = clock
        self._secret = secrets.token_bytes(32)

    def _mac(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        payload = f"{secrets.token_urlsafe(18)}.{math.ceil(self.clock() + self.lifetime_s)}"
        return f"{payload}.{self._mac(payload)}"

    def valid(self, value: str) -> bool:
        parts = value.split(".")
        if len(parts) != 3 or not value.isascii():
            return False
        session, expiry, mac = parts
        if not (expiry.isdigit() and len(expiry) <= 12):
            return False
        return hmac.compare_digest(mac, self._mac(f"{session}.{expiry}")) and int(expiry) > self.clock()


def allowed_names(config: ServerConfig) -> frozenset[str]:
    """The host names requests may use: loopback names, the bound name or address, this machine's
    names when bound beyond loopback, and ``config.allowed_hosts``."""
    names = set(LOOPBACK_NAMES) | set(config.allowed_hosts)
    ours = [config.host] if not config.everywhere else []
    if not config.loopback:
        ours += [socket.gethostname(), socket.getfqdn()]
    for name in ours:
        with contextlib.suppress(InputError):  # a name the Host check could never match
            names.add(normalize_host(name))
    return frozenset(names)


def _same_address(name: str, local: str) -> bool:
    """Whether ``name`` is an IP address written as digits, and the one the connection arrived at."""
    try:
        asked, arrived = ipaddress.ip_address(name), ipaddress.ip_address(local)
    except ValueError:
        return False
    mapped = getattr(arrived, "ipv4_mapped", None)  # an IPv4 client of a dual-stack (::) socket
    return asked == arrived or (mapped is not None and asked == mapped)


class Guard:
    """ASGI middleware: request size, Host header, token and sessions, and the security headers."""

    def __init__(self, app: ASGIApp, config: ServerConfig) -> None:
        self.app = app
        self.token = config.token
        self.names = allowed_names(config)
        self.sessions = Sessions(config.session_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._refusal(scope, request)
        if response is None and self.token:
            given = request.query_params.get("token")
            if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                response = self._remember(request)
            elif not self._allowed(request):
                response = _refuse(request, 401, "this dashboard needs its access token: open it once as "
                                   "?token=TOKEN, or send 'Authorization: Bearer TOKEN'", {"www-authenticate": "Bearer"})
        if response is not None:
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            await response(scope, receive, send)
            return

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, secured)

    def _refusal(self, scope: Scope, request: Request) -> Response | None:
        """414 for a request target over MAX_TARGET bytes, 421 for a host name not this dashboard's."""
        if len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") > MAX_TARGET:
            return _refuse(request, 414, f"the URL is longer than {MAX_TARGET} bytes", {"connection": "close"})
        name = host_of_header(request.headers.get("host", ""))
        local = (scope.get("server") or ("",))[0] or ""
        if name and (name in self.names or _same_address(name, str(local))):
            return None
        return _refuse(request, 421, "this dashboard does not answer to that host name "
                       "(madengine report serve --allowed-host NAME adds one)")

    def _allowed(self, request: Request) -> bool:
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer ") and hmac.compare_digest(bearer[7:].strip().encode(), self.token.encode()):
            return True
        return self.sessions.valid(request.cookies.get(COOKIE, ""))

    def _remember(self, request: Request) -> Response:
        """``?token=`` once: a session cookie, and the same URL without the token (out of history and logs)."""
        query = urlencode([(k, v) for k, v in parse_qsl(request.url.query, keep_blank_values=True) if k != "token"])
        path = "/" + request.url.path.lstrip("/")  # '//elsewhere' would send the browser to another site
        response = Response(status_code=303, headers={"location": path + (f"?{query}" if query else "")})
        response.set_cookie(COOKIE, self.sessions.issue(), max_age=math.ceil(self.sessions.lifetime_s), httponly=True,
                            samesite="strict", path="/")
        return response


def _refuse(request: Request, status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    """A refusal before any route: JSON under /api/, one line of text elsewhere."""
    line = f"{status}: {text}"
    if str(request.scope.get("path", "")).startswith("/api/"):  # not request.url: a bad Host header breaks it
        return JSONResponse({"error": line}, status_code=status, headers=headers)
    return PlainTextResponse(line + "\n", status_code=status, headers=headers)
