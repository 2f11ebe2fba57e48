"""A confirmation on the review page is bound to what the page showed, performed in a browser.

* An Undo (forced: "also restore files changed since") confirmed after the agent
  changed the same file again (a change set made between the page's listing and the
  click): before, the agent's newer write was overwritten, unseen; now the undo is
  refused, saying which set changed what, and nothing is undone.
* An Undo confirmed after the same set was undone elsewhere (the terminal's
  ``ringfence undo``): before, it was undone a second time; now it is refused.
* A person about to approve the first of two waiting questions, when the first
  times out and a third arrives: before, the page reloaded itself and the second
  question moved up under the pointer, so the click (and a hurried Confirm)
  approved a call the person never read; now a page with questions waiting never
  reloads itself (it offers to), the click answers the question read, which is no
  longer waiting (409), and nothing is approved.

Held (these passed before too; kept so they stay so): an approval confirmed in a
second tab after the first tab's deny answers nothing, and the deny's spent
confirmation replayed is refused; another origin's page holding the URL and a valid
confirmation can neither draw the page in a frame nor act through ``no-cors``
fetches or a beacon (403), after which the confirmation still works from the page.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import (
    HERE,
    choose,
    confirm,
    job_done,
    records,
    ringfence_process,
    url_in,
    visit,
    wait_until,
)
from test_review_refusals import attacker_site, write_with_agent


def ringfence(*argv: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def undo_sets(workspace: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", "checkpoints", "list", "--workspace", str(workspace),
         "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    listed = json.loads(proc.stdout)["result"]
    return [s for s in listed if s.get("undoes")]


def prepare_forced_undo(page: Any, base: str, set_id: str) -> None:
    """Undo with force, prepared: again when a live reload cleared the box before the click."""
    for _ in range(5):
        visit(page, base + f"changes/{set_id}")
        page.wait_for_timeout(500)  # a reload the page was about to do, done
        page.check("form:has(#undo-set) input[name=force]")
        choose(page, "#undo-set")
        if "FORCE" in page.inner_text("main"):
            return
    raise AssertionError("the forced undo was never prepared")


def test_a_forced_undo_confirmed_after_the_file_changed_again_is_refused(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    target = workspace / "a.txt"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        prepare_forced_undo(page, base, set_id)
        # Between the listing and the click, the agent writes the same file again.
        ringfence("call", "write_file", "--args",
                  json.dumps({"path": "a.txt", "content": "the agent's newer write\n"}),
                  "--workspace", str(workspace), "--events", str(tmp_path / "agent.jsonl"),
                  "--approve", "yes")  # fmt: skip
        confirm(page)
        ok, text = job_done(page)
        assert not ok, text
        assert "since the page showed" in text and "a.txt" in text, text
    assert target.read_text() == "the agent's newer write\n"  # not overwritten unseen
    recs = records(events)
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["undo"]
    assert not any(r["kind"] == "proposed" and r["tool"] == "undo" for r in recs)
    assert undo_sets(workspace) == []


def test_an_undo_confirmed_after_the_set_was_undone_elsewhere_is_refused(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        prepare_forced_undo(page, base, set_id)
        ringfence("undo", set_id, "--workspace", str(workspace),
                  "--events", str(tmp_path / "terminal.jsonl"), "--approve", "yes")  # fmt: skip
        confirm(page)
        ok, text = job_done(page)
        assert not ok, text
        assert "undone or removed since the page showed it" in text, text
    assert len(undo_sets(workspace)) == 1  # the terminal's, and no second undo
    assert not any(r["kind"] == "proposed" and r["tool"] == "undo" for r in records(events))


def test_a_question_never_moves_under_the_pointer_of_a_person_about_to_answer(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "asker.stderr"
    with errlog.open("w") as log:
        asker = subprocess.Popen(
            [sys.executable, str(HERE / "servers" / "asker.py"), str(workspace), "8"],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    try:
        base = url_in(errlog)
        wait_until(
            lambda: page.request.get(base + "approvals").text().count('class="question"') == 2,
            what="two questions",
        )
        visit(page, base + "approvals")
        first = page.locator("section.question").first
        assert "first.txt" in first.inner_text()
        box = first.locator("button[value=once]").bounding_box()
        assert box is not None
        # The first question times out and a third arrives while the person reads the first.
        wait_until(
            lambda: "third.txt" in page.request.get(base + "approvals").text(),
            what="the third question",
        )
        page.wait_for_timeout(1000)  # the page would have reloaded itself 300 ms after that
        # The person clicks where "Approve once…" of the question read is, and confirms.
        with page.expect_navigation():
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        if page.locator("#confirm").count():  # a confirmation: of a question never read
            page.wait_for_selector("#confirm:not([disabled])")
            with page.expect_navigation():
                page.click("#confirm")
            page.wait_for_selector("#job-state")
        out, _ = asker.communicate(timeout=60)
    finally:
        if asker.poll() is None:
            asker.kill()
            asker.communicate(timeout=10)
    assert json.loads(out.strip().splitlines()[-1]) == {
        "first.txt": False, "second.txt": False, "third.txt": False
    }  # fmt: skip
    assert list(workspace.iterdir()) == []  # nothing approved, nothing written
    assert "no longer waiting" in page.inner_text("main")  # the question read: gone


def test_an_approval_from_a_second_tab_after_a_deny_and_a_replayed_confirmation_do_nothing(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "asker.stderr"
    with errlog.open("w") as log:
        asker = subprocess.Popen(
            [sys.executable, str(HERE / "servers" / "asker.py"), str(workspace), "20"],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    other = page.context.new_page()
    try:
        base = url_in(errlog)
        port = base.split(":")[2].split("/")[0]
        for tab, choice in ((page, "deny"), (other, "once")):
            visit(tab, base + "approvals")
            tab.wait_for_selector("section.question")
            assert "first.txt" in tab.locator("section.question").first.inner_text()
            choose(tab, f"section.question >> nth=0 >> button[value={choice}]")
        denied = page.get_attribute("input[name=nonce]", "value")
        confirm(page)
        ok, text = job_done(page)
        assert ok and "deny" in text, text
        confirm(other)  # the second tab, prepared before the deny: approves nothing
        ok, text = job_done(other)
        assert not ok and "no longer waiting" in text, text
        replay = page.request.post(
            base + "confirm", form={"nonce": denied or ""},
            headers={"Origin": f"http://127.0.0.1:{port}"},
        )  # fmt: skip
        assert replay.status == 409 and "not valid" in replay.text()
        out, _ = asker.communicate(timeout=90)
    finally:
        other.close()
        if asker.poll() is None:
            asker.kill()
            asker.wait(10)
    assert json.loads(out.strip().splitlines()[-1])["first.txt"] is False
    assert not (workspace / "first.txt").exists()


def test_a_foreign_page_can_neither_frame_the_page_nor_act_through_no_cors_requests(
    page: Any, workspace: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    target = workspace / "a.txt"
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        visit(page, base + f"changes/{set_id}")
        choose(page, "#undo-set")
        nonce = page.get_attribute("input[name=nonce]", "value")
        page.wait_for_timeout(700)  # past the minimum delay: only the checks can refuse
        # Even holding the URL (token) and a valid confirmation, another origin's page frames
        # the page (to have the person click in it) and posts in every way a page can
        # without a form: no-cors fetch, a beacon, a text/plain and a urlencoded body.
        attack = f"""<iframe id="f" src="{base}changes/{set_id}"></iframe><script>
          const body = new URLSearchParams({{nonce: "{nonce}"}});
          window.done = Promise.allSettled([
            fetch("{base}confirm", {{method: "POST", mode: "no-cors", body}}),
            fetch("{base}confirm", {{method: "POST", mode: "no-cors",
                                   body: "nonce={nonce}", credentials: "include"}}),
            Promise.resolve(navigator.sendBeacon("{base}confirm", body)),
          ]).then(() => "sent");
        </script>"""
        attacker = page.context.new_page()
        # What came back to the other site: a status, or (the refusal carries the page's
        # Cross-Origin-Resource-Policy) the browser withholding the response from it.
        statuses: list[int] = []
        withheld: list[str] = []
        attacker.on(
            "response", lambda r: statuses.append(r.status) if r.url == base + "confirm" else None
        )
        attacker.on(
            "requestfailed",
            lambda r: withheld.append(r.failure or "") if r.url == base + "confirm" else None,
        )
        with attacker_site(attack) as evil:
            attacker.goto(evil)
            assert attacker.evaluate("window.done") == "sent"
            wait_until(lambda: len(statuses) + len(withheld) >= 3, what="the three posts answered")
            framed = next(f for f in attacker.frames if f != attacker.main_frame)
            assert 'id="undo-set"' not in framed.content()  # not drawn in their frame
        attacker.close()
        assert all(s == 403 for s in statuses), statuses
        assert all("ERR_BLOCKED_BY_RESPONSE" in w for w in withheld), withheld
        assert target.read_text() == "written by the agent\n"
        confirm(page)  # the same confirmation still works from the page itself
        ok, text = job_done(page)
        assert ok, text
    recs = records(events)
    assert [r["action"] for r in recs if r["kind"] == "review_action"] == ["undo"]


def _outward_address() -> str | None:
    """This machine's address on its way out (no packet is sent), if it has one."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_a_page_asked_to_listen_on_localhost_never_listens_where_that_name_is_not_loopback(
    workspace: Path, tmp_path: Path
) -> None:
    import os
    import re
    import shutil
    import socket
    import time

    import pytest

    address = _outward_address()
    if os.geteuid() != 0 or shutil.which("unshare") is None or address is None:
        pytest.skip("needs root, unshare(1) and an address other than loopback")
    # /etc/hosts mapping localhost elsewhere, in a mount namespace of this process alone.
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{address} localhost\n")
    errlog = tmp_path / "asker.stderr"
    with errlog.open("w") as log:
        asker = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", f'mount --bind "{hosts}" /etc/hosts && exec "$0" "$@"',
             sys.executable, str(HERE / "servers" / "asker.py"), str(workspace), "5", "localhost"],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        port = None
        while time.monotonic() < deadline and asker.poll() is None and port is None:
            found = re.search(r"review page at http://[^:/]+:(\d+)/", errlog.read_text())
            port = int(found.group(1)) if found else None
            time.sleep(0.1)
        if port is not None:  # it listens: from the network, at that address?
            with socket.create_connection((address, port), timeout=5):
                pass
            raise AssertionError(f"the page listens on {address}:{port}, not loopback")
        asker.communicate(timeout=60)
    finally:
        if asker.poll() is None:
            asker.kill()
            asker.communicate(timeout=10)
    text = errlog.read_text()
    assert asker.returncode != 0, text
    assert "loopback only" in text and address in text, text[-3000:]
    assert "Traceback" not in text or "InvalidArguments" in text
    assert list(workspace.iterdir()) == []
