"""Session grants typed at the terminal (`s NAME=GLOB`), through the CLI on a real pty.

A person answers the approval prompt of `ringfence run-script`; the script's later calls are
either covered by that grant (no second question) or asked again. The attacks are the two the
Gate issue names: a path that leaves the granted directory through `..`, and an argument the
pattern does not name (another command under a grant for a working directory).
"""

from __future__ import annotations

from pathlib import Path

from cli_helpers import run_on_pty

PROMPT = b"[d]eny?"


def _run(tmp_path: Path, ws: Path, script: str, answers: list[bytes], *extra: str):  # type: ignore[no-untyped-def]
    source = tmp_path / "script.py"
    source.write_text(script)
    return run_on_pty(
        ["run-script", str(source), "--workspace", str(ws), "--posture", "ask", *extra],
        tmp_path,
        new_session=True,
        prompt=PROMPT,
        answers=[b"o\n", *answers],  # the first question is the script itself
    )


def test_a_path_grant_covers_its_directory_and_not_a_dotdot_walk_out_of_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "notes" / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("precious\n")
    script = """
outcomes = []
for path in ["notes/one.txt", "notes/two.txt", "notes/sub/../../a.txt"]:
    try:
        call_tool("write_file", path=path, content="from the script\\n")
        outcomes.append("written " + path)
    except ToolError as error:
        outcomes.append(error.code + " " + path)
result = outcomes
"""
    run = _run(tmp_path, ws, script, [b"s path=notes/*\n", b"d\n"])
    # Asked for the script, the first write (granted for notes/*) and the `..` walk (denied);
    # notes/two.txt was covered by the grant without a question.
    assert run.output.count(PROMPT.decode()) == 3, run.output
    assert "written notes/one.txt" in run.output and "written notes/two.txt" in run.output
    assert "denied notes/sub/../../a.txt" in run.output
    assert (ws / "notes" / "two.txt").read_text() == "from the script\n"
    assert (ws / "a.txt").read_text() == "precious\n"


def test_a_grant_for_one_argument_does_not_cover_another_value_of_an_unnamed_one(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = """
outcomes = []
for text in ["same\\n", "same\\n", "other\\n"]:
    try:
        call_tool("write_file", path="notes.txt", content=text)
        outcomes.append("written " + text.strip())
    except ToolError as error:
        outcomes.append(error.code + " " + text.strip())
result = outcomes
"""
    # The grant names only `path`: a call with other `content` is a different call.
    run = _run(tmp_path, ws, script, [b"s path=notes.txt\n", b"d\n"])
    assert run.output.count(PROMPT.decode()) == 3, run.output
    assert "denied other" in run.output
    assert (ws / "notes.txt").read_text() == "same\n"


def test_a_pattern_naming_no_argument_of_the_call_is_asked_again(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = 'call_tool("write_file", path="x.txt", content="x")\nresult = "done"\n'
    run = _run(tmp_path, ws, script, [b"s cwd=*\n", b"d\n"])
    assert "'cwd' is not an argument of write_file" in run.output, run.output
    assert not (ws / "x.txt").exists()
