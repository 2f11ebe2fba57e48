"""Elicitation from the command line: a real SDK server asks, the CLI asks the person.

The CLI runs as a subprocess on a pseudo-terminal (``pty``) so its stdin and
stderr are a terminal; the test answers the form as a person would.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest
from mcp_host_helpers import PYTHON, SERVERS

from ringfence.cli import main


def add_form_server(home: Path, policy: str) -> None:
    env = {**os.environ, "RINGFENCE_HOME": str(home)}
    subprocess.run(
        [PYTHON, "-m", "ringfence", "mcp", "add", "form", "--transport", "stdio",
         "--command", PYTHON, "--arg", str(SERVERS / "form.py"), "--elicitation", policy],
        env=env, check=True, capture_output=True,
    )  # fmt: skip


def answer_of(reply: dict) -> dict:
    """What the server's tool got back: the JSON line inside the framed, untrusted text."""
    line = next(x for x in reply["result"]["text"].splitlines() if x.startswith('{"action"'))
    return json.loads(line)


class Terminal:
    """A child process on a pty: ``expect`` text, ``send`` lines."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True
        )
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never saw {text!r}; saw:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"ended before {text!r}; saw:\n{self.seen}")
                self.seen += chunk.decode("utf-8", "replace")

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout: float = 30) -> int:
        try:
            while True:
                ready, _, _ = select.select([self.master], [], [], 0.2)
                if ready:
                    chunk = os.read(self.master, 4096)
                    if not chunk:
                        break
                    self.seen += chunk.decode("utf-8", "replace")
                elif self.proc.poll() is not None:
                    break
        except OSError:
            pass
        code = self.proc.wait(timeout)
        os.close(self.master)
        return code


def test_a_form_is_asked_at_the_terminal_with_defaults_choices_and_validation(
    tmp_path: Path,
) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"  # side by side: a home in a root is refused
    ws.mkdir()
    add_form_server(home, "ask")
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "RINGFENCE_HOME": str(home), "TERM": "xterm"}
    term = Terminal(
        [PYTHON, "-m", "ringfence", "call", "mcp.form.book", "--approve", "yes", "--json",
         "--events", str(events), "--workspace", str(ws)],
        env, tmp_path,
    )  # fmt: skip
    try:
        term.expect("asks you for input")
        # Plainly the server's request, and what ringfence never asks for (issue 29, 8).
        term.expect("are the server's, not ringfence's")
        term.expect("ringfence never asks for a password, a token or a key in a form")
        term.expect("city [Oslo]: ")
        term.send("")  # the default, pre-filled
        term.expect("nights: ")
        term.send("zero")
        term.expect("whole number")
        term.send("40")
        term.expect("maximum of 30")
        term.send("3")
        term.expect("2) business")
        term.expect("cabin [economy]: ")
        term.send("2")
        term.expect("breakfast: ")
        term.send("y")
        term.expect("[s]end it")
        term.send("s")
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == 0, term.seen
    assert "\x1b[2J" not in term.seen and "\\x1b[2J" in term.seen  # server text escaped
    reply = json.loads(term.seen[term.seen.index("{\r\n") :].replace("\r\n", "\n"))
    sent = answer_of(reply)
    assert sent == {
        "action": "accept",
        "content": {"breakfast": True, "cabin": "business", "city": "Oslo", "nights": 3},
    }
    # The request passed the Gate as its own call, and was recorded.
    kinds = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(r.get("tool") == "mcp.form.__elicitation" for r in kinds)


def test_without_a_terminal_the_form_is_declined_with_a_reason(
    capsys, ringfence_home: Path, tmp_path: Path, monkeypatch
) -> None:
    add_form_server(ringfence_home, "allow")
    monkeypatch.setenv("RINGFENCE_WORKSPACE_ROOTS", str(tmp_path))
    code = main(["call", "mcp.form.book", "--approve", "yes", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert answer_of(out)["action"] == "decline"
    assert any("stdin is not a terminal" in w for w in out["warnings"])


def test_without_a_terminal_ask_is_declined_by_the_gate_with_a_reason(
    capsys, ringfence_home: Path, tmp_path: Path, monkeypatch
) -> None:
    add_form_server(ringfence_home, "ask")
    monkeypatch.setenv("RINGFENCE_WORKSPACE_ROOTS", str(tmp_path))
    # The tool call itself may run; the elicitation asks the (headless) approver: no.
    main(["call", "mcp.form.book", "--json", "--allow", "mcp.form.book"])
    out = json.loads(capsys.readouterr().out)
    assert answer_of(out)["action"] == "decline"
    assert any("asked for input: declined" in w and "headless" in w for w in out["warnings"])


@pytest.mark.parametrize("policy", ["deny"])
def test_elicitation_deny_is_not_offered(
    capsys, ringfence_home: Path, tmp_path: Path, monkeypatch, policy: str
) -> None:
    add_form_server(ringfence_home, policy)
    monkeypatch.setenv("RINGFENCE_WORKSPACE_ROOTS", str(tmp_path))
    main(["call", "mcp.form.book", "--approve", "yes", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert "stdin is not a terminal" not in json.dumps(out)  # nothing was asked
    assert "accept" not in json.dumps(out.get("result"))


def test_a_backtracking_form_pattern_at_the_terminal_costs_no_stall(tmp_path: Path) -> None:
    """The terminal checked the form (and each typed value) with jsonschema's backtracking
    ``re``: keeping a default that is a near miss of ``^(a+)+$`` held the command for seconds.
    The check is RE2's now: the near miss is refused at once and the form asked again."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    # This checkout's ringfence, whatever the child's cwd.
    env = {**os.environ, "RINGFENCE_HOME": str(home), "PYTHONPATH": str(Path(__file__).parents[2])}
    subprocess.run(
        [PYTHON, "-m", "ringfence", "mcp", "add", "form", "--transport", "stdio",
         "--command", PYTHON, "--arg", str(SERVERS / "redos_form.py"), "--elicitation", "ask"],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    term = Terminal(
        [PYTHON, "-m", "ringfence", "call", "mcp.form.ask", "--approve", "yes", "--json",
         "--workspace", str(ws)],
        {**env, "TERM": "xterm"}, tmp_path,
    )  # fmt: skip
    try:
        term.expect("asks you for input")
        term.expect("]: ")
        start = time.monotonic()
        term.send("")  # keep the default: 31 a's and a '!'
        term.expect("does not fit the form", timeout=60)
        took = time.monotonic() - start
        term.expect("]: ")
        term.send("aaa")
        term.expect("[s]end it")
        term.send("s")
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert took < 20.0, took  # a loaded machine; the backtracking: ~80 s
    assert code == 0, term.seen
    reply = json.loads(term.seen[term.seen.index("{\r\n") :].replace("\r\n", "\n"))
    assert answer_of(reply) == {"action": "accept", "content": {"v": "aaa"}}
