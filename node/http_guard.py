"""The checks every HTTP surface of minikafka runs before its handlers (the dashboard
today), so that a page in another tab cannot drive it and a DNS-rebinding page cannot
read it. As Jupyter's server does (a token, Host and Origin checks).

Rules, in the order they are checked; the first that fails answers:

1. Host. The ``Host`` header names a loopback name (127.0.0.1, localhost, [::1]) or the
   address the server is bound to, with the port the request came in on; anything else,
   or none, is 403. A DNS-rebinding page reaches 127.0.0.1 under its own name, and the
   browser puts that name in ``Host``.
2. Origin. A request that carries ``Origin`` comes from ``http://NAME:PORT`` with NAME
   and PORT as in rule 1; any other (``null`` included) is 403. Browsers send ``Origin``
   on every cross-origin request and on every POST.
3. Token. The request carries the token: ``Authorization: token T``, or, for a read
   (GET, HEAD) only, ``?token=T`` (a page's address and its ``EventSource``, which cannot
   set headers). Compared in constant time; missing or wrong is 401. Without a token
   (``--no-token``, loopback only) this rule is off and the others still apply.
4. Content-Type. A state-changing request (any method but GET, HEAD, OPTIONS) is
   ``application/json``, else 415: an HTML form or a ``text/plain`` fetch from another
   page (a "simple" request, sent without a CORS preflight) never is.

No CORS header is ever sent, so a foreign page can neither read an answer nor pass a
preflight. ``decide`` is the pure core (one request's facts in, a refusal or None out);
``install`` puts it on an aiohttp application as a middleware.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOKEN_RE = re.compile(r"[\x21-\x7e]{1,256}")   # visible ASCII: it goes in a header and a URL
HTTP_DEFAULT_PORT = 80


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str


@dataclass(frozen=True)
class Request:
    """What the checks read of one request (header values as sent, or None)."""
    method: str
    host: str | None
    origin: str | None = None
    authorization: str | None = None
    query_token: str | None = None
    content_type: str | None = None


def normalize(name: str) -> str:
    """A host name as compared: lower case, no brackets, an IP address in its short form."""
    name = name.strip().lower().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def is_loopback(host: str) -> bool:
    """A bind address that only this machine can reach."""
    name = normalize(host)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def allowed_names(*bound: str | None) -> frozenset[str]:
    """The loopback names and the bound addresses (not a wildcard such as 0.0.0.0)."""
    names = set(LOOPBACK_NAMES)
    for host in bound:
        if host:
            name = normalize(host)
            try:
                if ipaddress.ip_address(name).is_unspecified:
                    continue
            except ValueError:
                pass
            names.add(name)
    return frozenset(names)


def split_host(value: str) -> tuple[str, int] | None:
    """``Host`` header -> (name, port); None when malformed."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[:end + 1], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else ""
    else:
        name, _, port = value.partition(":")
    if not name or (port and not port.isdigit()) or (not port and value.endswith(":")):
        return None
    return normalize(name), int(port) if port else HTTP_DEFAULT_PORT


def token_from(authorization: str | None) -> str | None:
    scheme, _, value = (authorization or "").strip().partition(" ")
    return value.strip() if scheme.lower() == "token" and value.strip() else None


def decide(request: Request, *, token: str | None, names: frozenset[str],
           port: int) -> Refusal | None:
    """None when ``request`` may go on to its handler, else why not (rules 1-4 above)."""
    assert token is None or TOKEN_RE.fullmatch(token), "a token is visible ASCII"
    host = split_host(request.host) if request.host is not None else None
    if host is None or host[0] not in names or host[1] != port:
        return Refusal(403, f"Host {request.host!r} is not this server "
                            f"(open it as http://127.0.0.1:{port}/)")
    if request.origin is not None:
        try:
            origin = urlsplit(request.origin)
            origin_port = origin.port or HTTP_DEFAULT_PORT
        except ValueError:
            origin, origin_port = None, None
        if (origin is None or origin.scheme != "http" or origin.hostname is None
                or normalize(origin.hostname) not in names or origin_port != port):
            return Refusal(403, f"requests from Origin {request.origin!r} are refused")
    method = request.method.upper()
    if token is not None:
        given = token_from(request.authorization)
        if given is None and method in ("GET", "HEAD"):
            given = request.query_token
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            return Refusal(401, "this server needs its token: open the address it printed "
                                "at start (http://127.0.0.1:PORT/?token=...)")
    if method not in READ_METHODS:
        mime = (request.content_type or "").partition(";")[0].strip().lower()
        if mime != "application/json":
            return Refusal(415, f"a {method} must be Content-Type: application/json")
    return None


# ----------------------------------------------------------------- the aiohttp shell

def install(app, *, token: str | None, host: str) -> None:
    """Guard every request of ``app`` (bound to ``host``): refusals answer
    ``{"ok": false, "message": ...}`` with their status, as the handlers' errors do."""
    from aiohttp import web

    @web.middleware
    async def guard(request, handler):
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        local_ip, port = (sockname[0], sockname[1]) if sockname else (None, -1)
        refusal = decide(Request(request.method, request.headers.get("Host"),
                                 request.headers.get("Origin"),
                                 request.headers.get("Authorization"),
                                 request.query.get("token"),
                                 request.headers.get("Content-Type")),
                         token=token, names=allowed_names(host, local_ip), port=port)
        if refusal is not None:
            return web.Response(status=refusal.status, content_type="application/json",
                                text=json.dumps({"ok": False, "message": refusal.reason}))
        return await handler(request)

    async def headers(request, response):
        # the token is in the page's address: never send it on as a Referer
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"

    app.middlewares.append(guard)
    app.on_response_prepare.append(headers)
