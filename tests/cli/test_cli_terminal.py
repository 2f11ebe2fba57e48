"""Tables and progress: rich on a terminal, plain stable lines in pipes and files."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from cli_helpers import run_on_pty

from ringfence.cli._output import print_table, progress_lines


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tools_list_is_a_rich_table_on_a_terminal_and_plain_in_a_pipe(tmp_path: Path) -> None:
    shown = run_on_pty(
        ["tools", "list", "--backend", "local"],
        tmp_path,
        env={"TERM": "xterm-256color", "COLUMNS": "160"},
    ).output
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
    # undo and apply_changes (the dry run of a change-set shell) included
    assert len(lines) == 10 and all(len(line.split()) >= 3 for line in lines)
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
