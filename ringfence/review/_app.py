"""The review page over HTTP: the token in the path, serve's request guard, and the page's rules.

A request passes, in order:

1. :class:`PathToken`: the first path segment is the token (``/<token>/…``,
   the URL the command prints); it is moved into ``Authorization: Bearer``
   (any such header the client sent is dropped) and out of the path, so no
   log or record ever holds it; every answer, a refusal of the layers below
   too, gets the page's security headers there;
2. ``serve``'s :class:`~ringfence.serve.RequestGuard` (the same class as
   ``serve --transport http``): ``Host`` must be a loopback name with the
   bound port (421), an ``Origin`` must be the page's (403), the token must
   match in constant time (401), the body is bounded (413). Refusals are
   recorded (``review_refused``, bounded per window);
3. :class:`ReviewApp`: a state-changing request must be a ``POST`` with the
   page's own ``Origin`` (absent counts as foreign), no cross-site
   ``Sec-Fetch-Site``, and an urlencoded body (403/415, recorded). A
   cross-site form (another page submitting to this one) fails there even
   if it knew the token; every action is then two such requests (prepare,
   confirm: :mod:`._actions`).

Every answer carries a strict Content-Security-Policy (``default-src 'none'``,
the page's own script and style only, no inline code, no framing, forms post
only to the page, Trusted Types required so no script can write markup),
``nosniff``, ``no-store``, ``Referrer-Policy: same-origin`` and isolation headers.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from urllib.parse import parse_qsl

import trio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..runtime._errors import RingfenceError
from ..runtime._render import one_line
from ._html import Html
from ._site import PageError, ReviewSite, error_page

__all__ = ["CSP", "SECURITY_HEADERS", "PathToken", "ReviewApp"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), clipboard-read=()"),
)
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 16
STATIC = {"review.js": "text/javascript", "review.css": "text/css", "favicon.svg": "image/svg+xml"}
SSE_KEEPALIVE_SECONDS = 15.0


@dataclass
class PathToken:
    """``/<token>/rest`` → ``/rest`` with ``Authorization: Bearer <token>`` (module docstring)."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _headed(send)
        path: str = scope.get("path") or "/"
        _, _, rest = path.partition("/")
        token, slash, tail = rest.partition("/")
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"authorization"]
        if token:
            with contextlib.suppress(UnicodeEncodeError):
                headers.append((b"authorization", b"Bearer " + token.encode("ascii")))
        inner = "/" + tail if slash else "/"
        scope = {
            **scope,
            "path": inner,
            "raw_path": inner.encode("utf-8", "surrogateescape"),
            "headers": headers,
            "root_path": "",
        }
        await self.app(scope, receive, send)


def _headed(send: Send) -> Send:
    """``send`` with :data:`SECURITY_HEADERS` added to every response that lacks them: the
    guard's refusals (421, 401, 403, 413, 408, 503) are answered before the page's routes, and
    until 2026-12-07 they went out with none (no frame, sniffing or caching rule): another
    site could frame them, and a browser could keep them."""

    async def headed(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {bytes(name).lower() for name, _ in headers}
            headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            message = {**message, "headers": headers}
        await send(message)

    return headed


def _send_headers(content_type: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> list:
    return [(b"content-type", content_type.encode()), *SECURITY_HEADERS, *extra]


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    headers = _send_headers(content_type, extra)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class ReviewApp:
    """The page's routes behind the guard (module docstring); ``origins`` set once bound."""

    site: ReviewSite
    origins: frozenset[str] = frozenset()
    on_refused: Callable[[int, str, Scope], None] | None = None
    _static: dict[str, bytes] = field(default_factory=dict)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = scope.get("method", "GET")
        path: str = scope.get("path") or "/"
        client = str((scope.get("client") or ["?"])[0])
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            if method in ("GET", "HEAD"):
                await self._get(scope, path, receive, sending)
            elif method == "POST":
                form = await self._checked_form(scope, receive)
                await self._post(path, form, client, sending)
            else:
                raise PageError(405, "only GET and POST")
        except PageError as exc:
            if exc.status in (403, 415) and self.on_refused is not None:
                self.on_refused(exc.status, exc.text, scope)
            body = error_page(self.site, exc.status, exc.text)
            await _respond(send, exc.status, body.encode(), "text/html; charset=utf-8")
        except (RingfenceError, OSError) as exc:
            # What a view reads failing under it (the checkpoint store damaged, unreadable or
            # busy, a file gone): that view's error, said as the page says any; never a
            # traceback on the person's terminal and a bare 500 (until 2026-12-07 a store's
            # `sets` made a file took every change-set view down so).
            if started:
                raise
            text = (
                f"{exc.code}: {exc.message}"
                if isinstance(exc, RingfenceError)
                else f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
            )
            body = error_page(self.site, 409, f"{text}: nothing was done")
            await _respond(send, 409, body.encode(), "text/html; charset=utf-8")
        except Exception as exc:
            # A bug: one line on the terminal and the view's 500, not hypercorn's traceback.
            if started:
                raise
            sys.stderr.write(
                f"ringfence review: unexpected error in {one_line(path[:200])}: "
                f"{type(exc).__name__}: {one_line(str(exc)[:500])}\n"
            )
            body = error_page(self.site, 500, f"unexpected error ({type(exc).__name__})")
            await _respond(send, 500, body.encode(), "text/html; charset=utf-8")

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, scope: Scope, path: str, receive: Receive, send: Send) -> None:
        try:
            query = dict(
                parse_qsl(
                    scope.get("query_string", b"").decode("latin-1"),
                    max_num_fields=MAX_FORM_FIELDS,
                )
            )
        except ValueError:  # more fields than that: parse_qsl refuses to read on
            raise PageError(
                400, f"a query holds at most {MAX_FORM_FIELDS} fields: nothing was read"
            ) from None
        parts = [p for p in path.split("/") if p]
        site = self.site
        page: Html
        if not parts or parts == ["calls"]:
            page = site.timeline_page(query)
        elif parts[0] == "calls" and len(parts) == 2:
            page = site.call_page(parts[1])
        elif parts == ["approvals"]:
            page = site.approvals_page()
        elif parts[0] == "approvals" and len(parts) == 2:
            page = site.question_page(parts[1])
        elif parts == ["changes"]:
            page = await site.changes_page(query)
        elif parts[0] == "changes" and len(parts) == 2:
            page = await site.change_page(parts[1])
        elif parts == ["plans"]:
            page = site.plans_page()
        elif parts[0] == "plans" and len(parts) == 2:
            page = await site.plan_page(parts[1], query)
        elif parts[0] == "jobs" and len(parts) == 2:
            page = site.job_page(parts[1])
        elif parts == ["stream"]:
            await self._stream(receive, send)
            return
        elif parts == ["version"]:
            body = json.dumps({"version": site.version, "lines": site.feed.line_count}).encode()
            await _respond(send, 200, body, "application/json")
            return
        elif parts[0] == "static" and len(parts) == 2 and parts[1] in STATIC:
            await _respond(
                send, 200, self._static_file(parts[1]), f"{STATIC[parts[1]]}; charset=utf-8"
            )
            return
        else:
            raise PageError(404, "no such page")
        await _respond(send, 200, page.encode(), "text/html; charset=utf-8")

    def _static_file(self, name: str) -> bytes:
        if name not in self._static:
            self._static[name] = resources.files(__package__).joinpath("static", name).read_bytes()
        return self._static[name]

    async def _stream(self, receive: Receive, send: Send) -> None:
        """Server-sent events: ``version`` whenever anything shown changed (and keep-alives)."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": _send_headers("text/event-stream"),
            }
        )

        async with trio.open_nursery() as nursery:

            async def disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(disconnected)
            version = self.site.version
            await send(
                {
                    "type": "http.response.body",
                    "body": f"retry: 2000\ndata: {version}\n\n".encode(),
                    "more_body": True,
                }
            )
            while True:
                with trio.move_on_after(SSE_KEEPALIVE_SECONDS):
                    version = await self.site.changed(version)
                    await send(
                        {
                            "type": "http.response.body",
                            "body": f"data: {version}\n\n".encode(),
                            "more_body": True,
                        }
                    )
                    await trio.sleep(0.25)  # at most four updates a second
                    continue
                await send(
                    {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
                )

    # -- acting ------------------------------------------------------------------------------

    async def _checked_form(self, scope: Scope, receive: Receive) -> dict[str, str]:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None or origin not in self.origins:
            raise PageError(403, "a form must come from this page (its Origin): refused")
        site_header = headers.get("sec-fetch-site")
        if site_header is not None and site_header not in ("same-origin",):
            raise PageError(403, "a cross-site request cannot act on this page: refused")
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise PageError(415, "a form must be sent urlencoded: refused")
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise PageError(400, "the request ended early")
            body += message.get("body", b"")
            if len(body) > MAX_FORM_BYTES:
                raise PageError(413, f"a form holds at most {MAX_FORM_BYTES:,} bytes")
            if not message.get("more_body"):
                break
        try:
            pairs = parse_qsl(
                body.decode("utf-8"),
                keep_blank_values=True,
                max_num_fields=MAX_FORM_FIELDS,
                strict_parsing=bool(body),
            )
        except (UnicodeDecodeError, ValueError):
            raise PageError(400, "the form cannot be read") from None
        return dict(pairs)

    async def _post(self, path: str, form: dict[str, str], client: str, send: Send) -> None:
        parts = [p for p in path.split("/") if p]
        site = self.site
        if len(parts) == 3 and parts[0] == "approvals" and parts[2] == "prepare":
            page = site.prepare_answer(parts[1], form)
        elif len(parts) == 3 and parts[0] == "changes" and parts[2] == "prepare":
            page = await site.prepare_undo(parts[1], form)
        elif len(parts) == 3 and parts[0] == "plans" and parts[2] == "prepare":
            page = await site.prepare_apply(parts[1], form)
        elif parts == ["confirm"]:
            job = site.confirm(form.get("nonce", ""), client)
            location = site.link("jobs", job).encode()
            await _respond(send, 303, b"", "text/plain", ((b"location", location),))
            return
        else:
            raise PageError(404, "no such action")
        await _respond(send, 200, page.encode(), "text/html; charset=utf-8")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
