"""``toml_key_lines``: the line of every key, however strings and comments try to look like keys."""

from __future__ import annotations

import tomllib
from typing import Any

from ringfence.runtime._tomllines import line_of, toml_key_lines

TRICKY = '''\
top = "a # not a comment"   # a comment with [[server]] in it
"quoted.key" = 'lit "with" quotes'
dotted.inner = 1
multi = """
[[server]]
name = "fake"
"""
esc = "a\\"[[server]]\\""
lit = \'\'\'
[table]
\'\'\'
ends = """quote at the end"\"\"\"
inline = { a = 1, b = [1, 2], "c d" = { e = "}" } }

[[server]]
name = "one"
args = [
  "x",   # first
  """y
""",
  'z',
]

[server.env]
A = "1"

[[server]]
name = "two"
env.B = "2"
'''


def leaves(data: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in leaves(v, (*path, k))] or [path]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in leaves(v, (*path, i))] or [path]
    return [path]


def test_every_key_has_its_line() -> None:
    lines = toml_key_lines(TRICKY)
    for path in leaves(tomllib.loads(TRICKY)):
        assert path in lines, path
    assert lines[("top",)] == 1 and lines[("quoted.key",)] == 2 and lines[("dotted", "inner")] == 3
    assert lines[("esc",)] == 8 and lines[("lit",)] == 9 and lines[("ends",)] == 12
    assert lines[("inline", "c d", "e")] == 13
    assert lines[("server", 0)] == 15 and lines[("server", 0, "name")] == 16
    assert [lines[("server", 0, "args", i)] for i in range(3)] == [18, 19, 21]
    assert lines[("server", 0, "env", "A")] == 25
    assert lines[("server", 1)] == 27 and lines[("server", 1, "env", "B")] == 29
    assert ("server", 2) not in lines  # the fake tables inside strings are strings
    assert line_of(lines, ("server", 1, "missing")) == 27


def test_text_that_is_not_toml_gives_what_was_found() -> None:
    assert toml_key_lines('a = 1\nb = "unterminated\nc = 3\n') == {("a",): 1, ("b",): 2}
