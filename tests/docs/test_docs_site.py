"""The docs site builds with ``mkdocs build --strict``, offline, and reads offline.

``--strict`` turns every warning into a failure: a broken link or anchor, a page left out of the
navigation, a link to a repository file the site does not publish. The built pages must fetch
nothing from elsewhere (no CDN script, stylesheet or web font), so the site works where CI does:
with no network but the package registries.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import DOCS, REPO

REMOTE = re.compile(
    r"""<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.I
)
CSS_REMOTE = re.compile(r"""(?:@import|url\()\s*["']?(?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-6000:]
    return out


def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "serve" / "index.html").is_file()
    assert (site / "repo" / "SECURITY" / "index.html").is_file()  # the published repository file


def test_the_site_fetches_nothing_from_elsewhere(site: Path) -> None:
    remote = [
        f"{path.relative_to(site)}: {match.group(0)}"
        for path in site.rglob("*")
        if path.suffix in {".html", ".css", ".js"}
        for match in (REMOTE if path.suffix == ".html" else CSS_REMOTE).finditer(
            path.read_text(errors="replace")
        )
    ]
    assert remote == []


def test_every_page_is_in_the_navigation() -> None:
    """Each Markdown file under docs/ is a page of the site (strict mode warns on the rest)."""
    nav = (REPO / "mkdocs.yml").read_text()
    pages = [p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_hooks" not in p.parts]
    assert [p for p in pages if p not in nav] == []


def test_the_review_screenshots_are_linked() -> None:
    page = (DOCS / "review" / "README.md").read_text()
    shots = sorted(p.name for p in (DOCS / "review").glob("*.png"))
    assert shots and [s for s in shots if f"({s})" not in page] == []


def test_the_readme_is_the_short_front_door() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme
