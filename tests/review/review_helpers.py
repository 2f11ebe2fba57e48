"""Review page test helpers: real ``ringfence`` processes, a real browser, real MCP clients.

The browser is Debian's ``chromium``, headless, driven by Playwright for Python
with ``executable_path`` (Playwright's own browser downloads are never used).
Playwright rather than Selenium: one pip package, no driver binary that must
match the browser's version, and it exposes what these tests assert on
(console and page errors, dialogs, the ``securitypolicyviolation`` events
through an init script, raw requests with chosen headers, screenshots).
Without ``/usr/bin/chromium`` the tests skip, unless ``RINGFENCE_REQUIRE_BROWSER=1``
(CI) makes that a failure.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ringfence

REPO = Path(ringfence.__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Screenshots and the bench's figures go to docs/review/ only when asked
# (`make docs-screenshots`: RINGFENCE_REVIEW_SHOTS=docs/review): a test run leaves the
# checkout as it found it. Otherwise a temporary directory (they are still taken: a view that
# cannot be drawn fails the test).
_SHOTS_ASKED = os.environ.get("RINGFENCE_REVIEW_SHOTS")
SHOTS = Path(_SHOTS_ASKED or tempfile.mkdtemp(prefix="ringfence-review-shots-"))
if not _SHOTS_ASKED:  # the temporary one goes with the process (one per test worker)
    atexit.register(shutil.rmtree, SHOTS, ignore_errors=True)
URL_LINE = re.compile(r"review page at (http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]+/)")

# Installed in every page before its scripts run: what a script that should never run
# would leave behind, and every Content-Security-Policy violation the page reports.
WATCH_SCRIPT = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push({directive: e.violatedDirective, blocked: e.blockedURI,
                            sample: e.sample});
});
"""


def need_browser() -> None:
    if CHROMIUM.exists():
        return
    reason = f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("RINGFENCE_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + "; RINGFENCE_REQUIRE_BROWSER=1 requires it")
    pytest.skip(reason)


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Ringfence:
    """A ``python -m ringfence …`` process whose stderr is collected; its review URL."""

    process: subprocess.Popen[bytes]
    stderr: list[str] = field(default_factory=list)
    url: str | None = None
    _reader: threading.Thread | None = None

    def wait_for_url(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while self.url is None:
            if self.process.poll() is not None and self._reader is not None:
                self._reader.join(2)
                if self.url is None:
                    raise AssertionError(f"ringfence exited: {''.join(self.stderr)[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no review URL: {''.join(self.stderr)[-3000:]}")
            time.sleep(0.05)
        return self.url

    def stop(self) -> int:
        """SIGTERM: the page stops and the session seals its events; the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@contextmanager
def ringfence_process(*argv: str, cwd: Path | None = None) -> Iterator[Ringfence]:
    process = subprocess.Popen(
        [sys.executable, "-m", "ringfence", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    run = Ringfence(process)

    def read() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace")
            run.stderr.append(line)
            found = URL_LINE.search(line)
            if found and run.url is None:
                run.url = found.group(1)

    run._reader = threading.Thread(target=read, daemon=True)
    run._reader.start()
    try:
        yield run
    finally:
        run.stop()
        run._reader.join(10)
        if process.stderr is not None:
            process.stderr.close()


def url_in(path: Path, timeout: float = 60.0) -> str:
    """The review URL a process writes to its stderr file ``path``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            found = URL_LINE.search(path.read_text(errors="replace"))
            if found:
                return found.group(1)
        time.sleep(0.1)
    raise AssertionError(f"no review URL in {path}: {path.read_text(errors='replace')[-3000:]}")


def call_run_shell(workspace: Path, events: Path, command: str, *extra: str) -> dict[str, Any]:
    """``ringfence call run_shell`` (confined, change sets), approved, its result."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "ringfence", "call", "run_shell",
            "--args", json.dumps({"command": command}),
            "--workspace", str(workspace), "--events", str(events),
            "--approve", "yes", "--json", *extra,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["result"]


class Watch:
    """What a page did that it should not: dialogs, page errors, CSP violations, console errors."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.console: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def violations(self) -> list[dict[str, Any]]:
        return self.page.evaluate("window.__violations || []")


def screenshot(page: Any, name: str) -> None:
    """A view of the page into :data:`SHOTS` (docs/review/ for the docs: what the tests saw)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):  # a live reload may be under way: wait for it, try again
        try:
            page.wait_for_load_state()
            page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, timeout=10_000)
            return
        except Exception:  # playwright's TimeoutError or Error
            if attempt == 2:
                raise


def wait_until(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.1)


def visit(page: Any, url: str) -> None:
    """``page.goto(url)``, again when a live reload of the page it leaves got in the way (the
    navigation failed, or the page left is what is shown after it)."""
    for attempt in range(5):
        try:
            page.goto(url)
        except Exception as exc:  # playwright's Error
            text = str(exc)
            if attempt == 4 or not ("ERR_ABORTED" in text or "interrupted" in text):
                raise
        else:
            if page.url == url or attempt == 4:
                return  # (a URL the browser spells otherwise: shown as it is)
        page.wait_for_timeout(200)


def steady(page: Any, read: Any, ready: str = "#diff", url: str | None = None) -> Any:
    """``read(page)`` once ``ready`` is shown, again when the page's live reload (new
    activity) got in the way. With ``url``, the page is visited first, and again whenever it
    is found elsewhere: a live reload of the page left can land after the visit's navigation
    began and take its place (a CI flake: ``/changes`` shown where ``/changes/ID`` was
    visited, and ``#diff`` waited for there 30 s)."""
    for attempt in range(5):
        try:
            if url is not None and page.url != url:
                visit(page, url)
            page.wait_for_selector(ready, timeout=10_000)
            # Its stylesheet applied: a layout read before it loads measures the unstyled page
            # (CI: a diff's lines measured unwrapped, 24,850 px wide in a 1,264 px view).
            page.wait_for_load_state("load")
            return read(page)
        except Exception:  # playwright's Error: the execution context was destroyed
            if attempt == 4:
                raise
            page.wait_for_timeout(500)
    return None


def choose(page: Any, selector: str, expect: str = "#confirm") -> None:
    """Click ``selector`` (a link, or a button that leads to a confirmation page) and wait for
    the page it leads to (``expect`` on it).

    The page reloads itself 300 ms after new activity (``review.js``): a click that lands
    while it does is lost with the old page (a ``make test`` flake: the confirmation page never
    came). Clicked again then, up to three times; a second click only shows the same
    page again (nothing is answered before Confirm)."""
    for attempt in range(3):
        page.click(selector)
        try:
            page.wait_for_selector(expect, timeout=10_000)
            return
        except Exception:  # playwright's TimeoutError
            if attempt == 2:
                raise


def confirm(page: Any) -> None:
    """Click Confirm on a confirmation page once it is armed; land on the action's page.

    The waits are the page fixture's default (30 s), not the arming's 600 ms: on two busy
    cores (the suite's other worker, chromium) the confirmation page itself can be slow to
    come (a ``make test`` flake at 10 s)."""
    page.wait_for_selector("#confirm:not([disabled])")
    page.click("#confirm")
    try:
        page.wait_for_selector("#job-state")
    except Exception as exc:
        raise AssertionError(f"no action page after Confirm: {page.inner_text('body')}") from exc


def job_done(page: Any, timeout: float = 60.0) -> tuple[bool, str]:
    """Wait (the page reloads itself) until the action is done: (ok, its text)."""
    page.wait_for_selector('#job-state[data-done="1"]', timeout=timeout * 1000)
    ok = page.get_attribute("#job-state", "data-ok") == "1"
    return ok, page.inner_text("main")


def get(url: str) -> tuple[int, dict[str, str], str]:
    """``GET url`` on a fresh connection: status, headers (lower-cased names), body."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/" + path)
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def page_address(base: str) -> tuple[int, str, str]:
    """The page's port, token and ``Host`` value, from its URL (``http://127.0.0.1:P/T/``)."""
    port = int(base.split(":")[2].split("/")[0])
    return port, base.split("/")[3], f"127.0.0.1:{port}"
