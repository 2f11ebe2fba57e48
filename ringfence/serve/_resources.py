"""Workspace files as read-only MCP ``resources`` (``file://`` URIs under the first root).

Both requests become Gate calls of the kernel's own read tools, so the
policy, approvals, confinement and events of every other call apply:
``resources/list`` is ``glob_files`` (``**/*``), ``resources/read`` is
``read_file`` with the path *relative* to the root, resolved by the
workspace's confined walk (symbolic links out of the roots, ``..`` and git
metadata refusals included). Nothing here opens a file.

Guarantees:

- A URI is mapped to a path component by component (never by string
  prefix); one that is not ``file://`` (no host, or ``localhost``) below the
  first root is ``-32602`` and nothing is read, one no URL parser can split
  (``http://[::1/``) included.
- Under the ``unrestricted`` posture the file tools may leave the roots, so
  resources are refused (``-32602``) rather than read there.
- ``resources/list`` pages by ``PAGE_SIZE``; a cursor is the offset signed
  with a key of this server (HMAC-SHA256), so a made-up or altered cursor is
  ``-32602``. Not promised: a stable listing while files change between pages.
- A file that does not exist is ``-32002`` (resource not found); a refusal of
  the Gate or the workspace is ``-32603`` naming its ringfence code.

Not offered: subscriptions, templates, binary contents (``read_file`` reads text).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import mimetypes
import secrets
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..runtime._calls import Outcome
from ..runtime._errors import NotFound
from ..runtime._kernel import Kernel
from ..runtime.policy._decide import Posture

__all__ = ["PAGE_SIZE", "RESOURCE_NOT_FOUND", "WorkspaceResources"]

PAGE_SIZE = 100
_MAX_OFFSET_DIGITS = 18  # of a cursor's offset (one this server signed has far fewer)
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
Invoke = Callable[[str, dict[str, Any]], Awaitable[Outcome]]


class WorkspaceResources:
    """The ``resources/list`` and ``resources/read`` handlers' logic for one kernel."""

    def __init__(self, kernel: Kernel, page_size: int = PAGE_SIZE) -> None:
        self.kernel = kernel
        self.page_size = page_size
        self.root = PurePosixPath(kernel.roots[0]) if kernel.roots else None
        self._key = secrets.token_bytes(32)  # cursors are signed for this server only

    # -- cursors ---------------------------------------------------------------------------------

    def _sign(self, offset: int) -> str:
        mac = hmac.new(self._key, str(offset).encode(), hashlib.sha256).digest()[:12]
        return f"{offset}.{base64.urlsafe_b64encode(mac).decode()}"

    def _offset(self, cursor: str | None) -> int:
        if cursor is None:
            return 0
        offset, _, _mac = cursor.partition(".")
        # ASCII digits only, and few: str.isdigit takes "²" (int() refuses it) and int()
        # refuses 4,301 digits, and compare_digest refuses non-ASCII text; each escaped as a
        # Python error with code 0 instead of this refusal.
        if (
            offset.isascii()
            and offset.isdigit()
            and len(offset) <= _MAX_OFFSET_DIGITS
            and hmac.compare_digest(self._sign(int(offset)).encode(), cursor.encode())
        ):
            return int(offset)
        raise MCPError(
            code=types.INVALID_PARAMS,
            message="invalid cursor: use the nextCursor of the previous resources/list page",
        )

    # -- URIs ------------------------------------------------------------------------------------

    def uri(self, name: str) -> str:
        assert self.root is not None
        return "file://" + quote(str(self.root / name))

    def _relative(self, uri: str) -> str:
        """The path below the first root that ``uri`` names; -32602 for anything else."""
        self._check_posture()
        assert self.root is not None
        try:
            parts = urlsplit(uri)
        except ValueError:  # an unclosed "[" (``http://[::1/``): it escaped as code 0
            parts = None
        path = PurePosixPath(unquote(parts.path)) if parts is not None else None
        if (
            parts is None
            or path is None
            or parts.scheme != "file"
            or parts.netloc not in ("", "localhost")
            or ".." in path.parts
        ):
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="not a workspace resource: ringfence serves file:// URIs below "
                f"{self.root} only",
            )
        try:
            rel = path.relative_to(self.root)  # component by component
        except ValueError:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"not a workspace resource: {uri[:200]!r} is outside the workspace",
            ) from None
        if not rel.parts:
            raise MCPError(code=types.INVALID_PARAMS, message="the workspace root is not a file")
        return str(rel)

    def _check_posture(self) -> None:
        if self.root is None or self.kernel.posture is Posture.UNRESTRICTED:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="workspace resources are not offered under the unrestricted posture "
                "(file tools may leave the workspace there)",
            )

    # -- the handlers ----------------------------------------------------------------------------

    async def list(self, invoke: Invoke, cursor: str | None) -> types.ListResourcesResult:
        offset = self._offset(cursor)
        self._check_posture()
        outcome = await invoke("glob_files", {"pattern": "**/*"})
        if outcome.error is not None:
            raise _refused(outcome)
        names = sorted(str(n) for n in outcome.value)
        page = names[offset : offset + self.page_size]
        more = offset + self.page_size < len(names)
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=self.uri(name),
                    name=name,
                    mime_type=mimetypes.guess_type(name)[0] or "text/plain",
                )
                for name in page
            ],
            next_cursor=self._sign(offset + self.page_size) if more else None,
        )

    async def read(self, invoke: Invoke, uri: str) -> types.ReadResourceResult:
        rel = self._relative(uri)
        outcome = await invoke("read_file", {"path": rel})
        if isinstance(outcome.error, NotFound):
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"Resource not found: {rel}")
        if outcome.error is not None:
            raise _refused(outcome)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri,
                    mime_type=mimetypes.guess_type(rel)[0] or "text/plain",
                    text=str(outcome.value),
                )
            ]
        )


def _refused(outcome: Outcome) -> MCPError:
    assert outcome.error is not None
    return MCPError(
        code=types.INTERNAL_ERROR,
        message=f"{outcome.error.code}: {outcome.error.message}",
        data={"error": outcome.error.to_dict()},
    )
