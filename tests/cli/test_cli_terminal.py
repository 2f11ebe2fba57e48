"""Tables and progress: rich on a terminal, plain stable lines in pipes and files."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from ringfence.cli._output import print_table, progress_lines


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_on_pty(args: list[str], cwd: Path) -> str:
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringfence", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        close_fds=True,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"},
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return seen.decode(errors="replace")


def test_tools_list_is_a_rich_table_on_a_terminal_and_plain_in_a_pipe(tmp_path: Path) -> None:
    shown = run_on_pty(["tools", "list", "--backend", "local"], tmp_path)
    assert "\x1b[1m" in shown and "read_file" in shown  # bold names: rich rendered it
    piped = subprocess.run(
        [sys.executable, "-m", "ringfence", "tools", "list", "--backend", "local"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert "\x1b" not in piped
    lines = piped.splitlines()
    assert len(lines) == 9 and all(len(line.split()) >= 3 for line in lines)  # undo included
    assert next(x for x in lines if x.startswith("read_file ")).split()[1] == "read"


def test_plain_table_is_aligned_columns() -> None:
    out = io.StringIO()
    print_table(("NAME", "SIZE"), [("a", "1"), ("longer", "22")], out)
    assert out.getvalue() == "NAME    SIZE\na       1\nlonger  22\n"


def test_progress_is_plain_lines_off_a_terminal_and_a_spinner_on_one() -> None:
    plain = io.StringIO()
    with progress_lines("building", plain) as progress:
        progress("step 1")
        progress("step 2")
    assert plain.getvalue() == "step 1\nstep 2\n"

    term = FakeTerminal()
    with progress_lines("building", term) as progress:
        progress("step 1")
    text = term.getvalue()
    assert "step 1" in text and "building" in text
    assert "0:00:0" in text  # the elapsed-time column of the spinner line
