"""What stands between the network and the demo's app: the HTTP connection (time limits on a
request's headers and body, connection counts per client and in all) and each request (framing,
Host, Origin, the token, the security headers of every answer).

A connection gets ``header_timeout_s`` to send a request's headers and then ``body_timeout_s``
to send its body; past either it is closed, so clients that send nothing, or send slowly, never
hold the server. Connections beyond ``max_connections`` (or ``max_connections_per_client`` from
one address) are answered 503 with Retry-After. Device side only: no torch, no tensorflow.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import re
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["Access", "Guard", "Limits", "guarded_protocol", "host_allow_list", "is_loopback", "page_csp", "url_of"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Limits:
    header_timeout_s: float = 5.0  # from connecting (or the last answer) to a request's complete headers
    body_timeout_s: float = 10.0  # from the headers to the complete body
    max_connections: int = 200  # open connections in all; more get 503 with Retry-After
    max_connections_per_client: int = 100  # open connections from one address
    retry_after_s: int = 1


class _Counts:
    """Open connections, in all and per client address (one event loop: no lock needed)."""

    def __init__(self) -> None:
        self.total = 0
        self.per_client: Counter[str] = Counter()


def guarded_protocol(limits: Limits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the time limits and connection counts of ``limits``."""
    counts = _Counts()

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._phase: str | None = None
            self._timer = None
            self._counted = False
            address = self.client[0] if self.client else ""
            if counts.total >= 2 * limits.max_connections:  # far past the limit: not even an answer
                transport.close()
                return
            if (counts.total >= limits.max_connections
                    or counts.per_client[address] >= limits.max_connections_per_client):
                self.app = _too_many(limits.retry_after_s)  # answered once its headers arrive
            else:
                counts.total += 1
                counts.per_client[address] += 1
                self._counted = True
            self._watch()

        def connection_lost(self, exc) -> None:
            if getattr(self, "_counted", False):
                address = self.client[0] if self.client else ""
                counts.total -= 1
                counts.per_client[address] -= 1
                if counts.per_client[address] <= 0:
                    del counts.per_client[address]
                self._counted = False
            self._arm(None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def _watch(self) -> None:
            """Which part of a request the connection is waiting for, and the timer for it."""
            if self.transport.is_closing() or self.conn.their_state in (h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
                phase = None
            elif self.cycle is None or self.cycle.response_complete:
                phase = "headers"
            elif self.cycle.more_body and self.conn.their_state is h11.SEND_BODY:
                phase = "body"
            else:
                phase = None  # the app has the request; its own time limit (504) applies
            if phase != self._phase:
                self._arm(phase)

        def _arm(self, phase: str | None) -> None:
            if getattr(self, "_timer", None) is not None:
                self._timer.cancel()
                self._timer = None
            self._phase = phase
            if phase is not None:
                seconds = limits.header_timeout_s if phase == "headers" else limits.body_timeout_s
                self._timer = self.loop.call_later(seconds, self._expired)

        def _expired(self) -> None:
            self._timer = None
            if not self.transport.is_closing():
                log.info("closed a connection from %s: no complete request %s within the time limit",
                         self.client[0] if self.client else "?", self._phase)
                if self.cycle is not None and not self.cycle.response_complete:
                    self.cycle.disconnected = True
                    self.cycle.message_event.set()
                self.transport.close()

    return GuardedH11Protocol


def _too_many(retry_after_s: int):
    async def app(scope, receive, send) -> None:
        await _answer(send, 503, "busy: too many connections are open; try again shortly",
                      [(b"retry-after", str(retry_after_s).encode()), (b"connection", b"close")])

    return app


# -- each request ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Access:
    """Who may drive the API. ``allowed_hosts`` None: any Host header (an app served in-process);
    ``token`` None: no token asked for."""
    allowed_hosts: frozenset[str] | None = None
    token: str | None = None


SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def page_csp(page: str) -> str:
    """The Content-Security-Policy of the page: its own inline scripts (by hash) and nothing from
    elsewhere; the API on the same origin only; never in a frame."""
    hashes = " ".join(f"'sha256-{_b64sha256(s)}'" for s in re.findall(r"<script>(.*?)</script>", page, re.S))
    return ("default-src 'none'; script-src " + (hashes or "'none'") + "; style-src 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _b64sha256(text: str) -> str:
    import base64

    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


class Guard:
    """ASGI middleware: refuses requests with both Content-Length and Transfer-Encoding (400,
    connection closed), a Host outside the allow-list (403, against DNS rebinding), API calls from
    an Origin other than the page's own (403) or without the token when one is set (401); adds the
    security headers (and the page's CSP) to every answer."""

    def __init__(self, app, access: Access, csp: str):
        self.app = app
        self.access = access
        self.headers = [*SECURITY_HEADERS, (b"content-security-policy", csp.encode("ascii"))]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            status, message, extra = refusal
            await _answer(secured, status, message, extra)
            return
        await self.app(scope, receive, secured)

    def _refusal(self, scope) -> tuple[int, str, list] | None:
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), []).append(value)
        if b"content-length" in headers and b"transfer-encoding" in headers:
            return 400, "a request may not have both Content-Length and Transfer-Encoding", [(b"connection", b"close")]
        host = _one(headers, b"host")
        if self.access.allowed_hosts is not None and _host_name(host) not in self.access.allowed_hosts:
            return 403, (f"this server does not answer for the host {host!r}; start it with --allow-host "
                         f"{_host_name(host) or 'NAME'} to allow that name"), []
        if not scope["path"].startswith("/api/"):
            return None  # the page itself may be opened from a link anywhere (it is never framed: the CSP)
        origin = _one(headers, b"origin")
        if origin is not None and not _same_origin(origin, host):
            return 403, "requests from other web pages are refused; open the demo's own page", []
        if _one(headers, b"sec-fetch-site") == "cross-site":
            return 403, "requests from other web pages are refused; open the demo's own page", []
        if self.access.token is not None:
            given = _one(headers, b"authorization") or ""
            scheme, _, value = given.partition(" ")
            good = hmac.compare_digest(value.strip().encode(), self.access.token.encode())
            if scheme.lower() != "bearer" or not good:
                return 401, ("this demo wants its token: open the page as http://HOST:PORT/#token=TOKEN once "
                             "(the page keeps it), or send 'Authorization: Bearer TOKEN'"), \
                    [(b"www-authenticate", b'Bearer realm="albert-edge demo"')]
        return None


def _one(headers: dict[bytes, list[bytes]], name: bytes) -> str | None:
    values = headers.get(name)
    return values[0].decode("latin-1") if values else None


def _host_name(host: str | None) -> str:
    """The name or address of a Host header, without its port, lower case ("[::1]:8000" -> "::1")."""
    if not host:
        return ""
    parts = urlsplit("//" + host)
    try:
        return (parts.hostname or "").lower()
    except ValueError:
        return ""


def _same_origin(origin: str, host: str | None) -> bool:
    parts = urlsplit(origin)
    return parts.scheme == "http" and host is not None and parts.netloc.lower() == host.lower() and not parts.path


async def _answer(send, status: int, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


# -- addresses ---------------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is only this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def host_allow_list(bound: str, extra: tuple[str, ...] = ()) -> frozenset[str] | None:
    """The Host names the server answers to: loopback's, the bound address, this machine's name
    (and name.local, as mDNS gives it) and ``extra``. An address written as digits is always
    allowed too (DNS rebinding needs a name), which :class:`Guard` sees as any IP literal."""
    machine = socket.gethostname().lower()
    names = {"localhost", "127.0.0.1", "::1", bound.strip("[]").lower(), machine, f"{machine.split('.')[0]}.local",
             *(e.strip("[]").lower() for e in extra)}
    return _WithAddresses(names)


class _WithAddresses(frozenset):
    """A set of names that also holds every IP address literal."""

    def __contains__(self, name: object) -> bool:
        if super().__contains__(name):
            return True
        try:
            ipaddress.ip_address(str(name))
            return True
        except ValueError:
            return False


def url_of(host: str, port: int) -> str:
    """The URL of the page on ``host``:``port`` (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/"
