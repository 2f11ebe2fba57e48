"""A plugin's bundle as the command line reads it: names and links that are not text.

A file name is bytes; ``os.listdir`` hands the ones that are not UTF-8 on as lone surrogates,
and the bundle's digest (canonical JSON) could not encode them: ``plugin add`` and every
session start with such a file in a trusted plugin (one lying in a workspace: the agent's to
write) ended in ``unexpected error: UnicodeEncodeError`` instead of naming the file.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401  (autouse fixture)
from plugins_helpers import write_plugin

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_a_name_or_link_that_is_not_utf8_is_refused_by_name(capsys, tmp_path: Path) -> None:
    home = Path(os.environ["RINGFENCE_HOME"])
    folder = write_plugin(tmp_path / "kit", "kit")
    odd = os.path.join(os.fsencode(folder), b"a\xff.txt")
    with open(odd, "wb") as f:
        f.write(b"x")
    code, out = cli_json(capsys, "plugin", "add", str(folder))
    assert code == 2, out
    assert out["error"]["code"] == "invalid_arguments"
    assert "not UTF-8" in out["error"]["message"] and "a\udcff.txt" in out["error"]["message"]
    assert not (home / "plugins.toml").exists()
    os.unlink(odd)
    link = os.path.join(os.fsencode(folder), b"l")
    os.symlink(b"\xfe", link)
    code, out = cli_json(capsys, "plugin", "add", str(folder))
    assert code == 2 and "not UTF-8" in out["error"]["message"], out
    assert not (home / "plugins.toml").exists()


def test_a_trusted_plugin_given_such_a_name_refuses_the_session_naming_it(
    capsys, tmp_path: Path
) -> None:
    """The plugin lies in the workspace; the agent adds a file whose name is not UTF-8 (a
    shell command can): the session is refused, naming the file, not an unexpected error."""
    ws = tmp_path / "ws"
    (ws / "plugins").mkdir(parents=True)
    (ws / "x").write_text("keep\n")
    folder = write_plugin(ws / "plugins" / "guard", policy='deny = ["read_file(path=x)"]\n')
    assert cli_json(capsys, "plugin", "add", str(folder))[0] == 0
    assert cli_json(capsys, "plugin", "trust", "guard")[0] == 0
    with open(os.path.join(os.fsencode(folder), b"\xff"), "wb") as f:
        f.write(b"planted")
    args = ["--workspace", str(ws), "--backend", "local", "--approve", "yes"]
    code, out = cli_json(capsys, "call", "read_file", "--args", json.dumps({"path": "x"}), *args)
    assert code == 2, out
    assert out["error"]["code"] == "invalid_arguments" and "not UTF-8" in out["error"]["message"]
    assert "keep" not in json.dumps(out)


def test_a_plugin_folder_whose_path_is_not_utf8_is_refused_by_name(capsys, tmp_path: Path) -> None:
    """``plugin add`` of a folder below a directory named with a byte that is not UTF-8
    ended in ``unexpected error: UnicodeEncodeError`` when plugins.toml was written."""
    home = Path(os.environ["RINGFENCE_HOME"])
    parent = os.path.join(os.fsencode(tmp_path), b"odd\xff")
    os.mkdir(parent)
    folder = write_plugin(Path(os.fsdecode(parent)) / "kit", "kit")
    code, out = cli_json(capsys, "plugin", "add", str(folder))
    assert code == 2, out
    assert out["error"]["code"] == "invalid_arguments" and "UTF-8" in out["error"]["message"]
    assert not (home / "plugins.toml").exists()
