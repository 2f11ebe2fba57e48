"""``ringfence serve``: the session's governed tools as an MCP server (stdio or Streamable HTTP)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

import trio

from ..runtime._approval import ApprovalAnswer, Approver, HeadlessDenyApprover, ScriptedApprover
from ..runtime._errors import RingfenceError
from ..runtime._groups import raise_single
from ..runtime._kernel import Kernel
from ..serve._defaults import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    DEFAULT_PORT,
    DEFAULT_SESSION_IDLE_SECONDS,
    EXPOSE_CHOICES,
    TOKEN_ENV,
)
from ._output import envelope
from ._session import add_session_options, cli_headless_fix, kernel_from_args
from ._verbs import add_verb_parser, port_number, positive_seconds

if TYPE_CHECKING:
    from ..serve._http import HttpOptions
    from ..serve._logging import LogForwarder


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(
        sub,
        "serve",
        description="Expose the session's tools as an MCP server. Every call passes the Gate; "
        "when it asks, the calling client is asked (MCP elicitation), else --headless decides.",
    )
    p.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default: the client starts ringfence) or http (Streamable HTTP on --host:--port)",
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"HTTP: port (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.add_argument(
        "--expose",
        default="native",
        metavar="LIST",
        help=f"which tools to serve, comma-separated from {', '.join(EXPOSE_CHOICES)} "
        "(default native); connectors implies --mcp",
    )
    p.add_argument(
        "--headless",
        choices=["deny", "approve"],
        default="deny",
        help="who answers when the calling client cannot be asked (no elicitation support): "
        "deny (default) or approve once",
    )
    p.add_argument(
        "--review",
        action="store_true",
        help="also serve a local review page (its URL on stderr): a client that cannot be "
        "asked (no elicitation) gets its questions answered there instead of by --headless",
    )
    p.add_argument(
        "--approval-timeout",
        type=positive_seconds,
        default=DEFAULT_APPROVAL_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"how long one question to the client may wait before it counts as deny "
        f"(default {DEFAULT_APPROVAL_TIMEOUT_SECONDS:g})",
    )
    p.add_argument(
        "--session-idle-timeout",
        type=positive_seconds,
        default=DEFAULT_SESSION_IDLE_SECONDS,
        metavar="SECONDS",
        help="HTTP: end an MCP session with no request in flight this long (its client went "
        "away without ending it; a live client keeps a stream open) and drop what it held "
        f"(default {DEFAULT_SESSION_IDLE_SECONDS:g})",
    )
    p.add_argument(
        "--behind-tls-proxy",
        action="store_true",
        help=f"HTTP: state that TLS is terminated in front; required (with ${TOKEN_ENV}) "
        "to bind a non-loopback address",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="HTTP: another exact Host header value to answer (repeatable)",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="HTTP: another exact Origin to accept (repeatable)",
    )
    add_session_options(p)
    p.set_defaults(func=run)


def headless_approver(policy: str) -> Approver:
    if policy == "approve":
        return ScriptedApprover(lambda _r: ApprovalAnswer.once("--headless approve"))
    return HeadlessDenyApprover(cli_headless_fix)


def http_options(args: argparse.Namespace) -> tuple[HttpOptions, bool]:
    """Options from the command line and environment; (options, token was generated)."""
    from ..serve._http import HttpOptions, check_token  # the heavy names load when used

    token = check_token(args.settings.serve_token)
    generated = token is None
    return (
        HttpOptions(
            token=token if token is not None else HttpOptions.generate_token(),
            host=args.host,
            port=args.port,
            token_configured=not generated,
            behind_tls_proxy=args.behind_tls_proxy,
            allowed_hosts=tuple(args.allowed_host),
            allowed_origins=tuple(args.allowed_origin),
            session_idle_seconds=args.session_idle_timeout,
        ),
        generated,
    )


def _say(text: str) -> None:
    # stderr only: on stdio, stdout is the protocol stream.
    sys.stderr.write(f"ringfence serve: {text}\n")
    sys.stderr.flush()


async def run(args: argparse.Namespace) -> int:
    try:
        with library_logs_as_lines(args.settings.debug):
            return await _run(args)
    except BaseExceptionGroup as group:
        # Nurseries group what they raise; one ringfence error is reported as itself.
        raise_single(group, RingfenceError)


class _OneLine(logging.Handler):
    """What the libraries under ``serve`` log (the MCP SDK, hypercorn, ringfence's own
    ``ringfence.serve``), one line each on stderr, with no traceback.

    A record whose exception says a peer went away (a stream closed or broken under the
    SDK, a client that disconnected) is dropped: a client may leave at any moment, and
    a line per departure is noise. ``RINGFENCE_DEBUG=1`` prints every record whole.
    """

    def __init__(self, *, debug: bool = False) -> None:
        super().__init__()
        self.debug = debug

    def emit(self, record: logging.LogRecord) -> None:
        try:
            error = record.exc_info[1] if record.exc_info else None
            if self.debug:
                sys.stderr.write(logging.Formatter().format(record) + "\n")
                return
            if error is not None and _peer_went_away(error):
                return
            text = record.getMessage()
            if error is not None:
                text += (
                    f" ({type(error).__name__}: {error})"
                    if str(error)
                    else f" ({type(error).__name__})"
                )
            _say(f"{record.name}: {text}")
        except Exception:
            self.handleError(record)


def _peer_went_away(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) says the other end is gone."""
    import anyio  # loaded already: the SDK runs on it

    gone: tuple[type[BaseException], ...] = (
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
        anyio.EndOfStream,
        trio.ClosedResourceError,
        trio.BrokenResourceError,
    )
    if "starlette.requests" in sys.modules:  # HTTP: a client that disconnected mid-request
        gone += (sys.modules["starlette.requests"].ClientDisconnect,)
    seen: BaseException | None = error
    for _ in range(8):  # the chain of causes, bounded
        if seen is None:
            return False
        if isinstance(seen, gone):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextlib.contextmanager
def library_logs_as_lines(debug: bool = False) -> Iterator[None]:
    """While serving, log records at WARNING and above go through :class:`_OneLine` (a root
    handler, removed after). With ``RINGFENCE_DEBUG=1`` ringfence's own ``ringfence.serve``
    records come from DEBUG up (what a departed client's request raised, for one)."""
    root = logging.getLogger()
    ours = logging.getLogger("ringfence.serve")
    handler = _OneLine(debug=debug)
    saved = ours.level
    root.addHandler(handler)
    if debug:
        ours.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        ours.setLevel(saved)


async def _run(args: argparse.Namespace) -> int:
    from ..serve._approver import ClientApprover  # the heavy names load when used
    from ..serve._logging import LogForwarder
    from ..serve._server import exposed_tools, parse_expose, serve_stdio

    # serve speaks the handshake era (2025-11-25), where the logging capability is current:
    # the SDK's deprecation warning for it (SEP-2577, the 2026-07-28 era) would only be noise
    # on the server's stderr. This process is the command's own, so the filter is ours to set.
    warnings.filterwarnings(
        "ignore", message="The logging capability is deprecated", category=UserWarning
    )
    # What the command read (and answered) before it loaded this (._serve_early); None
    # when it did not, or in-process (main(argv)), where stdin is not the client's.
    early = getattr(args, "early_initialize", None) if args.transport == "stdio" else None
    expose = parse_expose(args.expose)
    if "connectors" in expose:
        args.mcp = True  # serving connector tools needs the manifest's servers connected
    # Check everything that can be refused before a kernel (and its backend) starts.
    options, generated = http_options(args) if args.transport == "http" else (None, False)
    # --review (or --approve review): the review page, in this session; with --review it
    # answers for clients that cannot be asked, in place of the --headless policy.
    review = None
    if args.review or args.approve == "review":
        from ._review_setup import ReviewSetup

        review = ReviewSetup.from_args(args, say=lambda url: _say(f"review page at {url}"))
    # --approve yes|no|review answers every question itself; otherwise ask the client. Set
    # when the kernel is made: nothing swaps a running kernel's approver.
    fallback = review.approver if review is not None else headless_approver(args.headless)
    approver = (
        ClientApprover(fallback, timeout_seconds=args.approval_timeout)
        if args.approve is None
        else None
    )
    # ringfence's events as MCP log notifications, for clients that set a level.
    logs = LogForwarder()
    kernel = kernel_from_args(args, approver, event_observer=logs, review=review)
    async with kernel, trio.open_nursery() as nursery:
        count = len(exposed_tools(kernel, expose))
        posture = kernel.posture.value
        if options is None:
            await nursery.start(_on_signals, nursery.cancel_scope, None)
            _say(f"serving {count} tools over stdio (posture {posture})")
            # until stdin closes
            await serve_stdio(kernel, expose=expose, logs=logs, early=early)
            nursery.cancel_scope.cancel()
        else:
            stop = trio.Event()
            await nursery.start(_on_signals, nursery.cancel_scope, stop)
            url = await nursery.start(
                _serve_until_stopped, kernel, options, expose, stop, nursery.cancel_scope, logs
            )
            _announce(url, options.token if generated else None, count, posture, args.json)
    return 0


async def _serve_until_stopped(
    kernel: Kernel,
    options: HttpOptions,
    expose: frozenset[str],
    stop: trio.Event,
    done: trio.CancelScope,
    logs: LogForwarder,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    from ..serve._http import serve_http

    await serve_http(
        kernel, options, expose=expose, shutdown=stop.wait, logs=logs, task_status=task_status
    )
    # Drained: end the signal watcher too, so the kernel closes and seals its events.
    done.cancel()


def _announce(url: str, token: str | None, count: int, posture: str, as_json: bool) -> None:
    if as_json:
        # HTTP leaves stdout free: the announcement is the one --json object, on one line.
        source = "generated" if token else TOKEN_ENV
        info = {"url": url, "token": token, "token_source": source, "tools": count}
        sys.stdout.write(json.dumps(envelope(True, {**info, "posture": posture})) + "\n")
        sys.stdout.flush()
        return
    _say(f"serving {count} tools at {url} (posture {posture})")
    if token is not None:
        _say(f"bearer token for this run: {token}")
        _say(f"(set ${TOKEN_ENV} to choose your own)")
    else:
        _say(f"bearer token: the value of ${TOKEN_ENV}")


async def _on_signals(
    scope: trio.CancelScope,
    stop: trio.Event | None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """SIGINT/SIGTERM/SIGHUP: HTTP drains in-flight requests first (a second signal cuts it
    short); either way the kernel then closes and seals the session's events.

    Started (not just spawned) before the server announces itself, so a signal
    sent right after the announcement is already ours to handle. SIGHUP (the
    terminal or the launching client went away) would otherwise end the process
    without a seal.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            if stop is None or stop.is_set():
                scope.cancel()
                return
            stop.set()
