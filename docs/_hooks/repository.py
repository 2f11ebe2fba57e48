"""MkDocs hook: publish the repository files the pages link to, and point those links at them.

The pages read well on a forge too, so they link to repository files by relative path
(``../SECURITY.md``). Those files lie outside ``docs/``, where MkDocs reports such a link as
broken (and ``--strict`` fails the build). :data:`PUBLISHED` files are added to the site under
``repo/`` and links to them are rewritten; a link to any other file outside ``docs/`` is left
as written, for ``--strict`` to report.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
# Repository files (relative to its root) that the site carries, and the folder it puts them in.
PUBLISHED = ("SECURITY.md", "benchmarks/README.md", "benchmarks/results/latest.png")
FOLDER = "repo"

# An inline link or image target: ](target) or ](target#anchor), no spaces, no scheme.
_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s#]+)(#[^)\s]*)?\)")


def on_files(files: Files, config: Any) -> Files:
    for path in PUBLISHED:
        files.append(File.generated(config, f"{FOLDER}/{path}", abs_src_path=str(ROOT / path)))
    return files


def repository_path(page_src_uri: str) -> str:
    """Where a page of the site lives in the repository (``docs/x.md`` or a published file)."""
    prefix = FOLDER + "/"
    if page_src_uri.startswith(prefix):
        return page_src_uri[len(prefix) :]
    return f"docs/{page_src_uri}"


def rewrite_links(markdown: str, page_src_uri: str) -> str:
    """Links from the page to a published repository file, pointed at its copy in the site."""
    here = posixpath.dirname(repository_path(page_src_uri))

    def replace(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(here, match.group(1)))
        if target not in PUBLISHED:
            return match.group(0)
        copy = posixpath.relpath(f"{FOLDER}/{target}", posixpath.dirname(page_src_uri) or ".")
        return f"]({copy}{match.group(2) or ''})"

    return _LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri.startswith(FOLDER + "/"):
        return markdown  # a published file's own links are relative to its copy: unchanged
    return rewrite_links(markdown, page.file.src_uri)
