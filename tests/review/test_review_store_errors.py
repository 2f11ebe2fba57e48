"""A checkpoint store the page cannot read, performed in a browser.

The change sets' views read the workspace's store at each view: a store whose ``sets`` is
not a directory any more (damaged, or replaced by whoever can write ``$RINGFENCE_HOME``) made
them a bare 500, with a Python traceback on the person's terminal for each view. Now such an
error is the view's error page (409, naming it), nothing more, and the page goes on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cli_helpers import isolated  # noqa: F401  (autouse fixture)
from review_helpers import get, ringfence_process, visit
from test_review_refusals import write_with_agent


def test_a_store_that_cannot_be_read_is_a_views_error_not_a_traceback(
    page: Any, workspace: Path, tmp_path: Path, ringfence_home: Path
) -> None:
    events = tmp_path / "events.jsonl"
    set_id = write_with_agent(workspace, events)
    argv = ("review", "--workspace", str(workspace), "--events", str(events),
            "--posture", "allow-reversible")  # fmt: skip
    with ringfence_process(*argv) as rf:
        base = rf.wait_for_url()
        status, _, body = get(base + "changes")
        assert status == 200 and set_id in body
        (sets,) = list((ringfence_home / "checkpoints").glob("*/sets"))
        os.rename(sets, sets.with_name("sets.aside"))
        sets.write_text("not a directory\n")
        try:
            for view in ("changes", f"changes/{set_id}"):
                status, headers, body = get(base + view)
                assert status == 409, (view, status, body[-2000:])
                assert "Not a directory" in body and 'id="error"' in body, body[-2000:]
                assert "content-security-policy" in headers
            visit(page, base + f"changes/{set_id}")
            assert "Not a directory" in page.inner_text("#error")
            status, _, body = get(base + "calls")  # the rest of the page goes on
            assert status == 200
        finally:
            sets.unlink()
            os.rename(sets.with_name("sets.aside"), sets)
        status, _, body = get(base + "changes")
        assert status == 200 and set_id in body
        assert page.watch.errors == [] and page.watch.dialogs == []
    stderr = "".join(rf.stderr)
    assert "Traceback" not in stderr and "NotADirectoryError" not in stderr, stderr[-3000:]
