"""Attacks on the review page itself, in a real browser and on the wire: each refused, no effect.

A wrong token, a foreign Host (DNS rebinding), a foreign Origin and a cross-site
form post (an attacker's page on another origin submitting a *valid* token and
a *valid* confirmation) are refused, recorded, and change nothing; the same
confirmation then works from the page itself, so what stopped the attack was
the check, not a bad nonce. The page cannot widen policy: an Undo that a deny
rule forbids is refused by the Gate.
"""

from __future__ import annotations

import http.client
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    choose,
    confirm,
    job_done,
    records,
    ringfence_process,
    steady,
    visit,
    wait_until,
)

from ringfence.review._actions import (
    BURST,
    CONFIRM_TTL_SECONDS,
    MIN_CONFIRM_SECONDS,
    Confirmations,
    RateLimit,
)


def write_with_agent(workspace: Path, events: Path) -> str:
    """``ringfence call write_file`` (approved): its change set's id."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "ringfence", "call", "write_file",
            "--args", json.dumps({"path": "a.txt", "content": "written by the agent\n"}),
            "--workspace", str(workspace), "--events", str(events), "--approve", "yes",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checkpoint = next(r for r in records(events) if r["kind"] == "checkpoint")
    return checkpoint["id"]


@contextmanager
def attacker_site(html: str) -> Iterator[str]:
    """Another origin (another port of 127.0.0.1) serving the attacker's page."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_wrong_token_foreign_host_and_origin_and_cross_site_forms_are_refused(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    target = workspace / "a.txt"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        port = int(base.split(":")[2].split("/")[0])
        token = base.split("/")[3]

        # A wrong token, and none: 401, and the body shows nothing of the session.
        for wrong in (f"http://127.0.0.1:{port}/{'x' * len(token)}/changes",
                      f"http://127.0.0.1:{port}/"):  # fmt: skip
            response = page.goto(wrong)
            assert response is not None and response.status == 401
            assert set_id not in page.content() and "a.txt" not in page.content()

        # A foreign Host (DNS rebinding: evil.example resolving to 127.0.0.1): 421.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", f"/{token}/changes", headers={"Host": f"evil.example:{port}"})
        answer = conn.getresponse()
        assert answer.status == 421 and set_id not in answer.read().decode()
        conn.close()

        # A valid confirmation, prepared on the page.
        # Through steady/choose: a live reload racing the visit or the click lost it (a flake).
        steady(page, lambda p: True, "#undo-set", url=base + f"changes/{set_id}")
        choose(page, "#undo-set")
        nonce = page.get_attribute("input[name=nonce]", "value")
        assert nonce
        page.wait_for_timeout(700)  # past the minimum delay: only the checks below can refuse

        # The token and nonce from a foreign Origin, a cross-site fetch, another body type.
        for headers, status in (
            ({"Origin": "http://evil.example"}, 403),
            ({"Origin": f"http://127.0.0.1:{port + 1}"}, 403),
            ({"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "cross-site"}, 403),
            ({"Origin": "null"}, 403),
        ):
            response = page.request.post(base + "confirm", form={"nonce": nonce}, headers=headers)
            assert response.status == status, (headers, response.status)
        response = page.request.post(
            base + "confirm", data=f"nonce={nonce}",
            headers={"Origin": f"http://127.0.0.1:{port}", "Content-Type": "text/plain"},
        )  # fmt: skip
        assert response.status == 415
        response = page.request.get(base + f"confirm?nonce={nonce}")  # no state change by GET
        assert response.status == 404

        # A cross-site form: the attacker's page (another origin) submits it in the browser.
        form = (
            f'<form method="post" action="{base}confirm">'
            f'<input name="nonce" value="{nonce}"></form>'
            "<script>document.forms[0].submit()</script>"
        )
        attacker = page.context.new_page()
        with attacker_site(form) as evil:
            with attacker.expect_response(lambda r: r.url == base + "confirm") as caught:
                attacker.goto(evil)
            assert caught.value.status == 403
        attacker.close()
        assert target.read_text() == "written by the agent\n"  # nothing was undone

        # The very same confirmation still works from the page itself.
        confirm(page)
        ok, text = job_done(page)
        assert ok, text
        wait_until(lambda: not target.exists(), what="the undo")
    recs = records(events)
    refused = [r for r in recs if r["kind"] == "review_refused"]
    assert {r["status"] for r in refused} >= {401, 403, 415, 421}
    assert not any(token in json.dumps(r) for r in recs)  # the token is never recorded
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["undo"]


def test_the_page_cannot_widen_policy(page: Any, workspace: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-all", "--deny", "undo")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + f"changes/{set_id}")
        choose(page, "#undo-set")
        confirm(page)
        ok, text = job_done(page)
        assert not ok and "denied" in text
        # No route changes a rule, the posture or the approver.
        for path in ("policy", "posture", "rules", "approver", "grants"):
            response = page.request.post(
                base + path, form={"posture": "unrestricted"},
                headers={"Origin": base.split("/" + base.split("/")[3])[0]},
            )  # fmt: skip
            assert response.status == 404
    assert (workspace / "a.txt").read_text() == "written by the agent\n"
    recs = records(events)
    undo = next(r for r in recs if r["kind"] == "decided" and r["tool"] == "undo")
    assert undo["verdict"] == "deny"
    assert not any(r["kind"] == "started" and r["tool"] == "undo" for r in recs)


# -- the guards' own rules -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_confirmation_is_single_use_short_lived_and_not_instant() -> None:
    clock = Clock()
    confirmations = Confirmations(clock=clock)
    made = confirmations.make("undo", {"ids": ["ab"]})
    assert "before" in str(confirmations.take(made.nonce))  # too fast: refused, kept
    clock.now += MIN_CONFIRM_SECONDS
    assert confirmations.take(made.nonce) == made
    assert "not valid" in str(confirmations.take(made.nonce))  # spent
    late = confirmations.make("undo", {"ids": ["cd"]})
    clock.now += CONFIRM_TTL_SECONDS + 1
    assert "expired" in str(confirmations.take(late.nonce))
    assert "not valid" in str(confirmations.take("guessed"))


def test_confirms_are_rate_limited() -> None:
    clock = Clock()
    limit = RateLimit(clock=clock)
    assert all(limit.take() == 0.0 for _ in range(BURST))
    assert limit.take() > 0
    clock.now += limit.refill_seconds
    assert limit.take() == 0.0
    assert limit.take() > 0


@pytest.mark.parametrize("choice", ["once", "session", "deny"])
async def test_a_page_answer_is_the_terminals(choice: str) -> None:
    from ringfence.review import ReviewApprover, answer_from_page
    from ringfence.runtime import ApprovalRequest, Choice

    request = ApprovalRequest("run_shell", {"command": "git status", "cwd": "."}, "irreversible",
                              "ask:run_shell", "asks", "mcp", "t1")  # fmt: skip
    assert answer_from_page(request, choice).choice is Choice(choice)
    assert "not an argument" in str(answer_from_page(request, "session", "path=*"))
    assert "only a session" in str(answer_from_page(request, "once", "cwd=*"))
    wide = answer_from_page(request, "session", 'command="git status*"')
    assert wide.pattern == {"command": "git status*"}  # type: ignore[union-attr]

    approver = ReviewApprover(timeout_seconds=0.2)
    answer = await approver.approve(request)  # nobody answers: a deny that says so
    assert answer.choice is Choice.DENY and "within 0.2 seconds" in answer.reason
    async with trio.open_nursery() as nursery:
        got: list[Any] = []

        async def ask() -> None:
            got.append(await approver.approve(request))

        nursery.start_soon(ask)
        await wait_async(lambda: approver.pending())
        question = approver.pending()[0]
        assert question.prompt == request.describe()
        assert approver.answer(question.id, answer_from_page(request, choice))  # type: ignore[arg-type]
    assert got[0].choice is Choice(choice)
    assert not approver.answer(question.id, answer_from_page(request, "once"))  # type: ignore[arg-type]


async def wait_async(check: Any) -> None:
    with trio.fail_after(5):
        while not check():
            await trio.sleep(0.01)
