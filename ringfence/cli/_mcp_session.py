"""The MCP part of a CLI session: which servers connect, who answers elicitations, what failed.

- ``--mcp`` connects every enabled server of the manifests. Without it,
  ``ringfence call mcp.<server>.<tool>`` connects only the server(s) whose name
  part is ``<server>`` (lazily: nothing else starts).
- Elicitations go to :class:`~ringfence.mcp_host._terminal.TerminalElicitor`
  on a terminal, else they are declined and the reason becomes a warning.
- :func:`session_warnings` is every server that did not connect, with its
  cause (the mcp_host's explained error), plus declined elicitations: verbs
  print them on stderr and under ``warnings`` in ``--json`` output.

Nothing here imports the MCP SDK unless a server is to be connected.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from ..runtime._errors import RingfenceError
from ..runtime._kernel import Kernel

__all__ = [
    "ELICITOR_KEY",
    "login_on_terminal",
    "mcp_failure_for",
    "mcp_setup",
    "sdk_logs_as_lines",
    "session_warnings",
    "with_login_advice",
]

ELICITOR_KEY = "cli_elicitor"


class _OneLine(logging.Handler):
    """A log record of the MCP SDK as one line on stderr: its message and, instead of a
    traceback, the exception's type and text (ringfence reports the failure itself)."""

    def emit(self, record: logging.LogRecord) -> None:
        from ..runtime._render import one_line

        try:
            text = record.getMessage()
            exc = record.exc_info[1] if record.exc_info else None
            if exc is not None:
                text += f" ({type(exc).__name__}: {exc})"
            sys.stderr.write(f"ringfence: mcp sdk: {one_line(text)}\n")
        except Exception:  # a log line must never end the verb
            self.handleError(record)


def sdk_logs_as_lines(debug: bool = False) -> None:
    """Show the MCP SDK's warnings and errors as one line each, never a traceback (once per
    process; ``debug`` (``RINGFENCE_DEBUG=1``) leaves Python's own logging, tracebacks included)."""
    sdk = logging.getLogger("mcp")
    if debug or any(isinstance(h, _OneLine) for h in sdk.handlers):
        return
    handler = _OneLine(logging.WARNING)
    sdk.addHandler(handler)
    sdk.propagate = False


def _oauth_servers(
    roots: Sequence[Path], tool: str | None, secret_names: Sequence[str] = ()
) -> list[Any]:
    """The servers (configs) a call of ``tool`` connects that log in through a browser
    (OAuth authorization code)."""
    part = server_part(tool)
    if part is None:
        return []
    from ..mcp_host.manifest._load import AuthMode, load_manifests

    manifest = load_manifests(str(roots[0]) if roots else None, secret_names=secret_names)
    return [
        s
        for s in manifest.servers
        if s.enabled
        and s.part == part
        and s.auth is AuthMode.OAUTH
        and s.oauth_grant == "authorization_code"
    ]


async def _registered_port(config: Any) -> int:
    """The loopback port the client was registered with at ``mcp login`` (0: none known).

    A login in the middle of a call lands there: a new port would register a new client,
    whose token a server may not accept for the session the call is in.
    """
    from urllib.parse import urlsplit

    from ..mcp_host.oauth._provider import SealedTokenStorage
    from ..runtime._redact import Redactor

    try:
        info = await SealedTokenStorage(config, Redactor()).get_client_info()
        uris = [str(u) for u in (info.redirect_uris or [])] if info is not None else []
        return (urlsplit(uris[0]).port or 0) if uris else 0
    except (RingfenceError, OSError, ValueError):
        return 0


@contextlib.asynccontextmanager
async def login_on_terminal(
    roots: Sequence[Path], tool: str | None, secret_names: Sequence[str] = ()
) -> AsyncIterator[None]:
    """While the block runs, an OAuth server's demand for a login (a 401 with no usable
    token, or a step-up's ``insufficient_scope``) is offered to the person at the terminal:
    asked first, then the browser, the redirect caught on 127.0.0.1, the call resumed.

    Only on a terminal (stdin and stderr), and only for a call of an MCP tool whose server
    logs in through a browser; otherwise the block runs as it is and such a demand fails
    naming `ringfence mcp login`. A "no" is a refusal: nothing is authorized.
    """
    servers = (
        _oauth_servers(roots, tool, secret_names)
        if sys.stdin.isatty() and sys.stderr.isatty()
        else []
    )
    if not servers:
        yield
        return
    names = [s.name for s in servers]
    import webbrowser

    import trio

    from ..mcp_host.oauth._login import loopback_flow
    from ..mcp_host.oauth._provider import login_flow
    from ..runtime._errors import Denied, Unavailable

    async def offer(url: str) -> None:
        sys.stderr.write(
            f"\nringfence: the MCP server {', '.join(repr(n) for n in names)} asks for "
            "authorization (a login, or more scope than the last one granted).\n"
            "  log in now in a browser? [y/N] "
        )
        sys.stderr.flush()
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if line.strip().lower() not in ("y", "yes"):
            raise Denied(
                "the login was declined at the terminal; nothing was authorized "
                f"(`ringfence mcp login {names[0]}` logs in apart from a call)",
                field="auth",
            )
        sys.stderr.write(f"ringfence: open this URL in a browser:\n{url}\n")
        sys.stderr.flush()
        await trio.to_thread.run_sync(webbrowser.open, url)

    port = await _registered_port(servers[0])
    async with contextlib.AsyncExitStack() as stack:
        try:
            flow = await stack.enter_async_context(loopback_flow(offer, port))
        except (Unavailable, BaseExceptionGroup) as exc:
            # That port is taken now: a free one (the client then registers anew).
            if port == 0 or not isinstance(_single(exc), Unavailable):
                raise
            flow = await stack.enter_async_context(loopback_flow(offer, 0))
        with login_flow(flow):
            yield


def _single(exc: BaseException) -> BaseException:
    from ..runtime._groups import single_error

    return single_error(exc) if isinstance(exc, BaseExceptionGroup) else exc


def with_login_advice(error: RingfenceError, tool: str | None) -> RingfenceError:
    """A refusal for want of scope (``insufficient_scope``) that sends the person to
    ``mcp login``, which asks for the configured scopes and so cannot end it: say what can."""
    server = server_part(tool)
    hint = f"run `ringfence mcp login {server}`"
    if server is None or "insufficient_scope" not in error.message or hint not in error.message:
        return error
    advice = (
        "run this same command on a terminal: ringfence then offers the login for the scope "
        f"the tool asks for (`ringfence mcp login {server}` asks only for the configured "
        "scopes, which the server just refused as too few)"
    )
    return error.with_(message=error.message.replace(hint, advice, 1))


def server_part(tool: str | None) -> str | None:
    """``github`` for ``mcp.github.create_issue``; None for a tool that is not an MCP tool."""
    if tool is None or not tool.startswith("mcp."):
        return None
    parts = tool.split(".")
    return parts[1] if len(parts) >= 3 and parts[1] else None


def mcp_setup(
    args: argparse.Namespace, roots: Sequence[Path], tool: str | None, *, interactive: bool
) -> tuple[Any, dict[str, Any] | None]:
    """``(mcp_manifest, mcp_options)`` for ``create_kernel``: what this session connects.

    ``interactive``: attach the CLI's elicitor (a terminal form, or a decline
    with a reason). Raises InvalidArguments for a malformed manifest when one
    has to be read.
    """
    options: dict[str, Any] = {}
    manifest: Any = True
    if getattr(args, "mcp", False) or server_part(tool) is not None:
        sdk_logs_as_lines(args.settings.debug)
    if not getattr(args, "mcp", False):
        part = server_part(tool)
        if part is None:
            return None, None  # nothing connects: not even the MCP SDK is imported
        from ..mcp_host.manifest._load import load_manifests

        manifest = load_manifests(
            str(roots[0]) if roots else None, secret_names=args.settings.secret_names
        )
        names = [s.name for s in manifest.servers if s.enabled and s.part == part]
        if not names:
            return None, None  # the call's not_found names the tool; nothing is started
        options["names"] = names
    options["token_store"] = args.settings.token_store()  # RINGFENCE_NO_KEYRING
    if interactive:
        from ..mcp_host._terminal import cli_elicitor

        options["elicitor"] = cli_elicitor()
    return manifest, options


def _connectors(kernel: Kernel) -> Any:
    return kernel.extensions.get("mcp")


def mcp_failure_for(kernel: Kernel, tool: str) -> RingfenceError | None:
    """The connection error of the server ``tool`` belongs to, if that server failed."""
    connectors, part = _connectors(kernel), server_part(tool)
    if connectors is None or part is None:
        return None
    from ..mcp_host.manifest._load import sanitize_part

    for name, error in connectors.failures.items():
        if sanitize_part(name, "server") == part:
            return error
    return None


def failed_servers(kernel: Kernel) -> dict[str, RingfenceError]:
    connectors = _connectors(kernel)
    return dict(connectors.failures) if connectors is not None else {}


def session_warnings(kernel: Kernel, *, leave_out: RingfenceError | None = None) -> list[str]:
    """Servers that did not connect (with their cause) and elicitations declined without a terminal."""
    out = [
        f"{error.message} ({error.code}; server {name!r} is not connected in this session)"
        for name, error in failed_servers(kernel).items()
        if error is not leave_out
    ]
    connectors = _connectors(kernel)
    for connector in connectors if connectors is not None else ():
        out += [
            f"MCP server {connector.name!r} asked for input: {f['message']}"
            for f in connector.diagnostics.failures
            if f["action"] == "elicitation"
        ]
    elicitor = kernel.extensions.get(ELICITOR_KEY)
    out += list(getattr(elicitor, "notes", ()))
    return out
